"""Capability names: normalize every spelling to lowercase ``domain.verb`` and spot look-alikes.

Teams registered ``inventory.query``, ``query_inventory`` and ``InventoryQuery`` for the same
thing, and case-sensitive matching found none of them. Here all three become ``inventory.query``.

``look_alikes`` and ``closest`` compare one name with every known one; ``NameIndex`` keeps the
registry's names indexed so both cost the same at 10 names as at 10,000 (see its docstring).
Every function here takes time linear in the length of the name (the regexes have fixed-width
look-arounds and single character classes; tests/test_names.py times 200-character names).
"""

from __future__ import annotations

import difflib
import heapq
import itertools
import re
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Set
from functools import lru_cache
from typing import TypeVar

# Words that read as the action. "QueryInventory" and "InventoryQuery" both put the verb last.
VERBS = frozenset(
    "query get list search find fetch read lookup create add put post write update set patch "
    "delete remove generate summarize summarise classify analyze analyse run execute compute "
    "send notify translate embed predict score check validate render convert export import "
    "sync upload download stream count report plan schedule book cancel".split()
)

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s_\-/:]+")


def words(name: str) -> list[str]:
    """Split any spelling (camelCase, snake_case, kebab, dotted) into lowercase words."""
    parts: list[str] = []
    for dotted in name.strip().split("."):
        for chunk in _SEPARATORS.split(_CAMEL.sub(" ", dotted)):
            if chunk:
                parts.append(chunk.lower())
    return parts


@lru_cache(maxsize=4096)
def normalize(name: str) -> str:
    """Return the canonical ``domain.verb`` form of a capability name.

    A name that already has a dot keeps its order (just lowercased, words joined by ``_``);
    otherwise the verb (a known action word, else the first word) goes last.
    """
    stripped = name.strip()
    if not stripped:
        raise ValueError("capability name is empty")
    if "." in stripped:
        segments = ["_".join(words(seg)) for seg in stripped.split(".")]
        joined = ".".join(s for s in segments if s)
        if not joined:
            raise ValueError(f"capability name {name!r} has no words")
        return joined
    ws = words(stripped)
    if not ws:
        raise ValueError(f"capability name {name!r} has no words")
    if len(ws) == 1:
        return ws[0]
    if ws[0] in VERBS:
        verb, domain = ws[0], ws[1:]
    elif ws[-1] in VERBS:
        verb, domain = ws[-1], ws[:-1]
    else:
        verb, domain = ws[0], ws[1:]
    return f"{'_'.join(domain)}.{verb}"


@lru_cache(maxsize=4096)
def shape(name: str) -> frozenset[str]:
    """Words of a name regardless of order: equal shapes mean look-alike names."""
    return frozenset(words(name))


def look_alikes(name: str, known: Iterable[str]) -> list[str]:
    """Known names that differ from ``name`` only in form (same words, other order or case)."""
    target = shape(name)
    return sorted(k for k in known if k != name and shape(k) == target)


def closest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names nearest to ``name``, best first, for ``no_route`` suggestions: those
    spelled alike (``difflib``, ratio at least 0.45, first ``COMPARED`` characters), then those
    sharing a word, alphabetically. Compares ``name`` with every known one; ``NameIndex.closest``
    gives the same answer without doing so."""
    pool = sorted(set(known))
    wanted = _wanted(name)
    hits = _spelled_alike(wanted, pool, n)
    target = shape(wanted)
    return _fill(hits, (k for k in pool if shape(k) & target), n)


# Bounds of ``NameIndex.closest`` (see its docstring).
EXACT = 16  # up to this many names, every one is compared
SHORTLIST = 12  # past that, difflib ranks at most this many
SCAN = 1000  # trigram postings read per query, at most
MAX_GRAMS = 40  # distinct trigrams indexed per name (its first ones)
MAX_WORDS = 8  # distinct words indexed per name for word overlaps (alphabetically first)
COMPARED = 64  # difflib compares names by their first this many characters
CUTOFF = 0.45


class NameIndex:
    """A set of names, indexed for look-alikes and ``no_route`` suggestions (pure, no I/O).

    ``look_alikes`` and ``same_shape`` are one dict look-up (shape → names). ``closest`` gives
    what the module's ``closest`` gives over the same names, without reading them all: up to
    ``EXACT`` names it compares every one (the answer is the same); past that it reads at most
    ``SCAN`` entries of the trigram index (the name's rarest trigrams first), lets difflib rank
    only the ``SHORTLIST`` names sharing the largest share of trigrams with it, and takes word
    overlaps from per-word sorted lists, merged. So a query costs O(SCAN + SHORTLIST) whatever
    the size, and the answer can differ from the exhaustive one only past ``EXACT`` names, when
    a name difflib would rank high shares few trigrams with the query, or a word overlap is
    past a name's first ``MAX_WORDS`` words.

    ``add`` and ``discard`` cost O(``MAX_GRAMS`` + ``MAX_WORDS``) dict operations, plus a move
    of each word's sorted list (a memmove of as many pointers as names share the word).
    """

    __slots__ = ("_grams", "_by_shape", "_by_gram", "_by_word", "_sorted")

    def __init__(self, known: Iterable[str] = ()) -> None:
        # name → how many trigrams it is indexed under. Little is kept per name, and nothing
        # the garbage collector has to walk: what ``discard`` needs is computed again.
        self._grams: dict[str, int] = {}
        # Inner dicts are insertion-ordered sets: iteration (hence every answer) depends only
        # on the order names came in, never on string hashing.
        self._by_shape: dict[frozenset[str], dict[str, None]] = {}
        self._by_gram: dict[str, dict[str, None]] = {}
        self._by_word: dict[str, list[str]] = {}  # each list sorted
        self._sorted: list[str] | None = None
        for name in known:
            self.add(name)

    # ------------------------------------------------------------ the set

    def __len__(self) -> int:
        return len(self._grams)

    def __contains__(self, name: object) -> bool:
        return name in self._grams

    def __iter__(self) -> Iterator[str]:
        return iter(self._ordered())

    def sorted(self) -> list[str]:
        """Every name, sorted (kept between changes, so repeated calls cost a copy)."""
        return list(self._ordered())

    def add(self, name: str) -> bool:
        """Index ``name``; False if it already was."""
        if name in self._grams:
            return False
        form = shape(name)
        _put(self._by_shape, form, name)
        grams = _grams(name)
        self._grams[name] = len(grams)
        by_gram = self._by_gram
        for gram in grams:
            _put(by_gram, gram, name)
        by_word = self._by_word
        for word in _index_words(form):
            listed = by_word.get(word)
            if listed is None:
                by_word[word] = [name]
            else:
                listed.insert(bisect_left(listed, name), name)
        self._sorted = None
        return True

    def discard(self, name: str) -> bool:
        """Forget ``name``; False if it was not indexed."""
        if self._grams.pop(name, None) is None:
            return False
        form = shape(name)
        _drop(self._by_shape, form, name)
        for gram in _grams(name):
            _drop(self._by_gram, gram, name)
        for word in _index_words(form):
            listed = self._by_word[word]
            del listed[bisect_left(listed, name)]
            if not listed:
                del self._by_word[word]
        self._sorted = None
        return True

    # ------------------------------------------------------------ queries

    def same_shape(self, name: str) -> Set[str]:
        """The indexed names with the words of ``name`` (``name`` too, if indexed): a live
        view, in the order they were added."""
        found = self._by_shape.get(shape(name))
        return found.keys() if found is not None else frozenset()

    def look_alikes(self, name: str) -> list[str]:
        """``look_alikes(name, self)``: the other names with the same words, sorted."""
        return sorted(k for k in self.same_shape(name) if k != name)

    def closest(self, name: str, n: int = 3) -> list[str]:
        """``closest(name, self, n)``, within the bounds in the class docstring."""
        wanted = _wanted(name)
        target = shape(wanted)
        if len(self) <= EXACT:
            pool = self._ordered()
            hits = _spelled_alike(wanted, pool, n)
            return _fill(hits, (k for k in pool if shape(k) & target), n)
        hits = _spelled_alike(wanted, sorted(self._shortlist(wanted)), n)
        listed = [self._by_word[w] for w in target if w in self._by_word]
        return _fill(hits, _unique(heapq.merge(*listed)), n)

    # ------------------------------------------------------------ internals

    def _ordered(self) -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self._grams)
        return self._sorted

    def _shortlist(self, wanted: str) -> list[str]:
        """Up to ``SHORTLIST`` names sharing the largest share of trigrams with ``wanted``
        (Dice's coefficient), counted over at most ``SCAN`` postings, rarest trigrams first."""
        grams = _grams(wanted)
        postings = sorted((p for g in grams if (p := self._by_gram.get(g))), key=len)
        shared: dict[str, int] = {}
        budget = SCAN
        for posting in postings:
            if len(posting) > budget:
                if not shared:  # every trigram it has is common: the rarest one's first names
                    shared = dict.fromkeys(itertools.islice(posting, budget), 1)
                break
            budget -= len(posting)
            for k in posting:
                shared[k] = shared.get(k, 0) + 1
        size, sizes = len(grams), self._grams
        return heapq.nlargest(SHORTLIST, shared, key=lambda k: shared[k] / (size + sizes[k]))


def _wanted(name: str) -> str:
    return normalize(name) if name.strip() else name


def _spelled_alike(wanted: str, pool: Iterable[str], n: int) -> list[str]:
    """``difflib.get_close_matches(wanted, pool, n, CUTOFF)``, comparing the first ``COMPARED``
    characters of each (difflib's cost grows with the product of the two lengths)."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(wanted[:COMPARED])
    scored: list[tuple[float, str]] = []
    for k in pool:
        matcher.set_seq1(k[:COMPARED])
        if (matcher.real_quick_ratio() >= CUTOFF and matcher.quick_ratio() >= CUTOFF
                and matcher.ratio() >= CUTOFF):
            scored.append((matcher.ratio(), k))
    return [k for _, k in heapq.nlargest(n, scored)]


def _fill(hits: list[str], overlaps: Iterable[str], n: int) -> list[str]:
    """``hits`` then the first ``overlaps`` not among them, ``n`` in all."""
    out = hits[:n]
    for k in overlaps:
        if len(out) >= n:
            break
        if k not in hits:
            out.append(k)
    return out


def _unique(ordered: Iterable[str]) -> Iterator[str]:
    last = None
    for k in ordered:
        if k != last:
            yield k
            last = k


def _grams(name: str) -> tuple[str, ...]:
    """The first ``MAX_GRAMS`` distinct character trigrams of ``name``, ends marked."""
    padded = f"\0{name}\0"
    distinct = dict.fromkeys(padded[i:i + 3] for i in range(len(padded) - 2))
    return tuple(itertools.islice(distinct, MAX_GRAMS))


def _index_words(form: frozenset[str]) -> list[str]:
    return sorted(form)[:MAX_WORDS]


_K = TypeVar("_K")


def _put(index: dict[_K, dict[str, None]], key: _K, name: str) -> None:
    entry = index.get(key)
    if entry is None:
        index[key] = {name: None}
    else:
        entry[name] = None


def _drop(index: dict[_K, dict[str, None]], key: _K, name: str) -> None:
    """Take ``name`` out of ``index[key]``, and the entry out once it is empty."""
    entry = index[key]
    del entry[name]
    if not entry:
        del index[key]
