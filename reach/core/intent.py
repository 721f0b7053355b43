"""Intent routing (pure): free text in Chinese or English → the capability that fits, or none.

Every capability is described by what its agents declared: its name's words, its example
``intents``, its ``tags`` and its ``description``. ``build`` turns that catalogue into an
``Index`` once (feature → the capabilities that use it, each weighted by the feature's rarity
and the field it came from), so routing one request only looks up the request's own features
(``intent_text.features``). ``IndexCache`` keeps the index until the catalogue changes.

``resolve`` refuses to guess: it routes only when the best capability has at least ``FLOOR``
of evidence (about one distinctive word) *and* leads the runner-up by ``MARGIN`` of its score.
Otherwise it says why (``Outcome``), with the two candidates of an ambiguous request and the
closest capabilities as suggestions.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from reach.core import names
from reach.core.intent_text import features, words

# The longest request looked at, in characters (the wire's limit on ``submit.intent``).
MAX_TEXT = 2000
# Evidence the best capability needs: one word (or Chinese bigram) that no other capability
# uses scores 1.0; one shared by many scores less (``Index.rarity``).
FLOOR = 2.4
# The evidence only the best has, over what only the runner-up has (``distinct``): it needs
# at least ``LEAD`` of its own, and the runner-up's own may be at most (1 - MARGIN) of it.
LEAD = 1.0
MARGIN = 1.0
# Evidence a capability needs to be suggested when nothing is routed.
SUGGEST = 0.25
# How many suggestions a refusal lists at most.
SUGGESTIONS = 4
# How many of the request's words a refusal shows per suggestion (``Decision.why``).
WHY_WORDS = 4

# How much a feature counts, by the field of the declaration it was found in.
SATURATE = 1.0
FIELDS = {"name": 1.5, "intents": 1.0, "tags": 1.0, "description": 0.5}


@dataclass(frozen=True, slots=True)
class Entry:
    """One capability as the catalogue describes it (all its agents' declarations merged)."""

    name: str
    intents: tuple[str, ...] = ()
    description: str = ""
    tags: tuple[str, ...] = ()


class Outcome(enum.Enum):
    MATCH = "match"            # routed
    AMBIGUOUS = "ambiguous"    # two capabilities fit about as well: ``candidates``
    WEAK = "weak"              # nothing fits well enough: ``suggestions`` may still list some
    EMPTY = "empty"            # no words to match (blank, only punctuation or symbols)
    TOO_LONG = "too_long"      # longer than ``MAX_TEXT``; not looked at


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``resolve`` decided: the capability (None unless ``MATCH``), the two candidates of
    an ambiguous request, and the closest capabilities, best first. A refusal says ``why``
    each candidate or suggestion came up: the request's own words that matched it.
    ``learned``: routed by a phrase a caller taught (``intent_learn``), not by evidence."""

    outcome: Outcome
    capability: str | None = None
    candidates: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()
    scores: tuple[tuple[str, float], ...] = field(default=(), compare=False)
    why: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)
    learned: bool = False


@dataclass(frozen=True, slots=True)
class Index:
    """The catalogue, inverted: feature → [(capability number, weight)]; ``numbers`` is
    capability name → its number."""

    names: tuple[str, ...]
    postings: dict[str, list[tuple[int, float]]]
    numbers: dict[str, int] = field(init=False, default_factory=dict)  # from names

    def __post_init__(self) -> None:
        self.numbers.update((name, n) for n, name in enumerate(self.names))

    def __len__(self) -> int:
        return len(self.names)


def rarity(capabilities: int, using: int) -> float:
    """A feature's weight by how many capabilities use it: 1.0 for one, falling towards 0.2
    for one that all of them use (log-scaled, so it means the same at 20 and at 500)."""
    return math.log(1 + capabilities / using) / math.log(1 + capabilities)


def _fields(entry: Entry) -> Iterable[tuple[str, str]]:
    yield "name", " ".join(names.words(entry.name))
    for phrase in entry.intents:
        yield "intents", phrase
    for tag in entry.tags:
        yield "tags", tag.replace("-", " ").replace("_", " ")
    yield "description", entry.description


def weights(entry: Entry) -> dict[str, float]:
    """One capability's features, each weighted by the fields it is found in: the fields'
    weights (``FIELDS``) add up and saturate, so a word its name, tags and intents all use
    counts more than one an intent mentions in passing, but not without bound."""
    found: dict[str, float] = {}
    for kind, text in _fields(entry):
        scale = FIELDS[kind]
        for feat in features(text):
            found[feat] = found.get(feat, 0.0) + scale
    return {feat: (1 + SATURATE) * s / (s + SATURATE) for feat, s in found.items()}


def build(entries: Iterable[Entry],
          known: Mapping[Entry, dict[str, float]] | None = None) -> Index:
    """The index of a catalogue: each capability's ``weights`` (taken from ``known`` when
    the same entry was weighed before), then each feature weighted by its rarity."""
    ordered = sorted(entries, key=lambda e: e.name)
    postings: dict[str, list[tuple[int, float]]] = {}
    for number, entry in enumerate(ordered):
        own = known.get(entry) if known is not None else None
        for feat, scale in (weights(entry) if own is None else own).items():
            postings.setdefault(feat, []).append((number, scale))
    total = len(ordered)
    for feat, users in postings.items():
        weight = rarity(total, len(users))
        postings[feat] = [(number, scale * weight) for number, scale in users]
    return Index(tuple(e.name for e in ordered), postings)


def score(wanted: dict[str, float], index: Index) -> dict[int, float]:
    """Evidence per capability number: the sum, over the request's features (``wanted``,
    from ``intent_text.features``) that the capability uses, of the feature's own weight
    times its weight in the index."""
    out: dict[int, float] = {}
    postings = index.postings
    for feat, own in wanted.items():
        for number, weight in postings.get(feat, ()):
            out[number] = out.get(number, 0.0) + own * weight
    return out


def resolve(text: str, index: Index,
            learned: Callable[[str], str | None] | None = None) -> Decision:
    """Route ``text``: the capability ``learned`` has for it (a phrase a caller taught), if
    still in the index; else the best capability when it has ``FLOOR`` of evidence and leads
    the runner-up by ``MARGIN``; else why not, with candidates, suggestions and ``why``."""
    if len(text) > MAX_TEXT:
        return Decision(Outcome.TOO_LONG)
    if learned is not None:
        chosen = learned(text)
        if chosen is not None and chosen in index.numbers:
            return Decision(Outcome.MATCH, capability=chosen, learned=True)
    wanted = features(text)
    if not wanted:
        return Decision(Outcome.EMPTY)
    evidence = score(wanted, index)
    top = [(index.names[n], s) for n, s in heapq.nsmallest(
        SUGGESTIONS, evidence.items(), key=lambda kv: (-kv[1], index.names[kv[0]]))]
    shown = tuple((name, round(s, 4)) for name, s in top)
    suggestions = tuple(name for name, s in top if s >= SUGGEST)
    if not top or top[0][1] < FLOOR:
        return Decision(Outcome.WEAK, suggestions=suggestions, scores=shown,
                        why=explain(text, wanted, index, suggestions))
    best = top[0][0]
    if len(top) > 1:
        runner = top[1][0]
        own, other = distinct(wanted, index, index.numbers[best], index.numbers[runner])
        if own < LEAD or other > own * (1 - MARGIN):
            candidates = (best, runner)
            return Decision(Outcome.AMBIGUOUS, candidates=candidates, suggestions=suggestions,
                            scores=shown, why=explain(text, wanted, index, tuple(
                                dict.fromkeys(candidates + suggestions))))
    return Decision(Outcome.MATCH, capability=best, suggestions=suggestions, scores=shown)


def distinct(wanted: dict[str, float], index: Index, best: int, runner: int
             ) -> tuple[float, float]:
    """The evidence only one of two capabilities has: (the best's, the runner-up's), each
    summed over the request's features the other does not use. Near neighbours share their
    head words ("refund" in refund.issue and refund.status); what tells them apart is the
    rest, so that is what a lead is measured on."""
    own = other = 0.0
    postings = index.postings
    for feat, weight in wanted.items():
        mine = theirs = 0.0
        for number, w in postings.get(feat, ()):
            if number == best:
                mine = w
            elif number == runner:
                theirs = w
        if mine and not theirs:
            own += weight * mine
        elif theirs and not mine:
            other += weight * theirs
    return own, other


def explain(text: str, wanted: dict[str, float], index: Index,
            capabilities: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Per capability, the words of ``text`` that matched it, strongest first (at most
    ``WHY_WORDS``; a Chinese character is not shown again inside a shown word). Only a
    refusal pays for this."""
    said = words(text)
    out = []
    for cap in capabilities:
        number = index.numbers.get(cap)
        hits = []
        for feat, own in wanted.items():
            for n, weight in index.postings.get(feat, ()):
                if n == number:
                    hits.append((-own * weight, said.get(feat, feat)))
        shown: list[str] = []
        for _, word in sorted(hits):
            if word not in shown and not any(word in w for w in shown):
                shown.append(word)
        out.append((cap, tuple(shown[:WHY_WORDS])))
    return tuple(out)


_UNBUILT = object()  # the key of a cache that has built nothing: no key equals it


class IndexCache:
    """One catalogue's index, kept while its key (the registry's catalogue version) holds:
    the index is built on the first request after a change, not on every request, and a
    rebuild weighs again only the capabilities whose declarations changed.

    An edge that rebuilds on a worker thread calls ``prepare`` there (it only reads what the
    cache holds) and ``install`` back on the loop; meanwhile ``get(stale_ok=True)`` answers
    with the index it has."""

    __slots__ = ("_index", "_key", "_weights")
    _index: Index

    def __init__(self) -> None:
        self._key: Hashable = _UNBUILT
        self._weights: dict[Entry, dict[str, float]] = {}

    @property
    def built(self) -> bool:
        """Whether an index was built yet (before, ``get`` builds one whatever ``stale_ok``)."""
        return self._key is not _UNBUILT

    @property
    def key(self) -> Hashable:
        """The key of the index held (a value no key equals before the first build)."""
        return self._key

    def get(self, key: Hashable, entries: Callable[[], Iterable[Entry]],
            stale_ok: bool = False) -> Index:
        if key != self._key:
            if stale_ok and self._key is not _UNBUILT:
                return self._index
            self.install(key, *self.prepare(list(entries())))
        return self._index

    def prepare(self, current: list[Entry]) -> tuple[dict[Entry, dict[str, float]], Index]:
        """The weights and index of ``current``, reusing the weights of entries that did not
        change; changes nothing here."""
        known = self._weights
        fresh = {e: known.get(e) or weights(e) for e in current}
        return fresh, build(current, fresh)

    def install(self, key: Hashable, fresh: dict[Entry, dict[str, float]], index: Index) -> None:
        self._weights, self._index, self._key = fresh, index, key
