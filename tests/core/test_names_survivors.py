"""Tests that pin behaviour of reach/core/names.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed. Most are about
``no_route`` suggestions (``closest`` and ``NameIndex.closest``): which names a caller who
misspelt a capability is offered, and the bounds that keep one such query cheap however many
names the registry holds (``EXACT``, ``SHORTLIST``, ``SCAN``, ``MAX_GRAMS``, ``MAX_WORDS``,
``COMPARED``, ``CUTOFF``). The bounds are written out as numbers here, not imported: they are
the promise, and a test that read them from the module would move with them.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.names import NameIndex, closest, normalize

# ------------------------------------------------------------------ instruments


@contextmanager
def compared_by_difflib() -> Iterator[list[str]]:
    """The names difflib is asked to compare with the wanted one, in order (what a query costs:
    difflib's work grows with the product of the two lengths)."""
    seen: list[str] = []

    class Recording(difflib.SequenceMatcher):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.recording = True

        def set_seq1(self, a: Any) -> None:
            if getattr(self, "recording", False):  # not the empty one __init__ sets
                seen.append(a)
            super().set_seq1(a)

    with mock.patch.object(difflib, "SequenceMatcher", Recording):
        yield seen


class Counted(str):
    """A name that counts how often it is compared with something (``==``, ``!=``, ``<`` ...):
    the work a query or a listing does on names, without timing anything."""

    comparisons = 0

    def _count(self) -> None:
        Counted.comparisons += 1

    def __eq__(self, other: object) -> bool:
        self._count()
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        self._count()
        return str.__ne__(self, other)

    def __lt__(self, other: str) -> bool:
        self._count()
        return str.__lt__(self, other)

    def __le__(self, other: str) -> bool:
        self._count()
        return str.__le__(self, other)

    def __gt__(self, other: str) -> bool:
        self._count()
        return str.__gt__(self, other)

    def __ge__(self, other: str) -> bool:
        self._count()
        return str.__ge__(self, other)

    __hash__ = str.__hash__


def _code(i: int, width: int, letters: str = "defghijklmnopqrstuvwxyz") -> str:
    """``i`` written in ``letters`` (no a, b or c by default), ``width`` characters."""
    out = ""
    for _ in range(width):
        i, digit = divmod(i, len(letters))
        out = letters[digit] + out
    return out


def _fillers(count: int) -> list[str]:
    """Names that share no word and no trigram with the ones the tests ask about."""
    return [f"zone{_code(i, 2, 'klmnpqrsuvwxyz')}.sync" for i in range(count)]


# ------------------------------------------------------------------ spelled alike: CUTOFF, COMPARED


def test_a_name_exactly_at_the_045_cutoff_is_suggested_and_one_just_below_is_not() -> None:
    """Suggestions are names spelled at least 0.45 alike (difflib's ratio, 2*matches/total):
    a caller asking for ``inventory`` is offered a 31-character name containing it (ratio
    18/40 = 0.45 exactly: its quick bounds are 0.45 too) but not a 32-character one (18/41).
    Neither shares a word with the request, so only spelling can bring them in."""
    at_cutoff = "inventorykeeping_warehouse_dock"  # 31 characters
    below = "inventorykeeping_warehouse_docks"  # 32 characters
    assert len(at_cutoff) == 31 and len(below) == 32
    assert closest("inventory", [at_cutoff, below]) == [at_cutoff]  # lines 106, 255, 256
    assert NameIndex([at_cutoff, below]).closest("inventory") == [at_cutoff]


def test_names_are_compared_by_their_first_64_characters() -> None:
    """difflib's cost grows with the product of the lengths, so only the first 64 characters
    of each name count: two long names that agree with the request that far are equally good,
    and (as with ``difflib.get_close_matches``) ties go to the name last alphabetically, even
    when the other one also matches the 65th character."""
    head = "inventory.query_by_warehouse_region_shelf_bin_and_colour_of_box"
    assert len(head) == 63
    wanted = head + "ax"
    same_65 = head + "ax_and_more"  # agrees with the request on 65 characters and more
    same_64 = head + "az"  # agrees on 64, then differs
    assert closest(wanted, [same_65, same_64]) == [same_64, same_65]  # line 105


# ------------------------------------------------------------------ EXACT and SHORTLIST


def test_up_to_16_names_every_one_is_compared_past_that_only_a_shortlist() -> None:
    """A registry of up to 16 names gets the exhaustive answer: difflib compares the request
    with every name. From 17 names on, difflib ranks only the names that share trigrams with
    the request, 12 at most, so a ``no_route`` costs the same at 17 names as at 10,000."""
    alike = [f"sales.query{_code(i, 1)}" for i in range(13)]  # 13 names sharing trigrams
    sixteen = alike + _fillers(3)
    with compared_by_difflib() as seen:
        NameIndex(sixteen).closest("sales.query")
    assert len(seen) == 16  # lines 100, 209: up to 16, all of them
    seventeen = alike + _fillers(4)
    with compared_by_difflib() as seen:
        NameIndex(seventeen).closest("sales.query")
    assert len(seen) == 12 and set(seen) < set(alike)  # lines 100, 101, 209
    with compared_by_difflib() as seen:
        NameIndex(alike + _fillers(500)).closest("sales.query")
    assert len(seen) == 12


def test_index_closest_offers_three_suggestions_by_default() -> None:
    """``no_route`` lists three suggestions (routing calls ``closest`` without ``n``)."""
    index = NameIndex([f"sales.query{_code(i, 1)}" for i in range(20)])
    assert len(index.closest("sales.query")) == 3  # line 205


# ------------------------------------------------------------------ the shortlist is by Dice


def _trigrams(name: str) -> set[str]:
    """The reference: a name's first 40 distinct trigrams, its ends marked with NUL."""
    padded = f"\0{name}\0"
    distinct = dict.fromkeys(padded[i:i + 3] for i in range(len(padded) - 2))
    return set(list(distinct)[:40])


def _dice(a: str, b: str) -> Fraction:
    ta, tb = _trigrams(a), _trigrams(b)
    return Fraction(2 * len(ta & tb), len(ta) + len(tb))


_abcd = st.text(alphabet="abcd", min_size=1, max_size=60)


def test_the_last_shortlist_place_goes_to_the_larger_share_of_trigrams() -> None:
    """The shortlist ranks by the share of trigrams in common, shared / (request's + name's):
    a long name sharing 3 of its 24 trigrams (3/32) beats a short one sharing 1 of 5 (1/13)
    for the last of the 12 places, so it is the one difflib gets to rank."""
    wanted = "abcdefgh"
    strong = [f"abcdef{c}" for c in "ijklmnopqrs"]  # 11 names sharing 5 trigrams each
    long_name = "abcdwvutsrqponmlkjizyxwvu"  # shares 3 of its 24 trigrams
    short_name = "xyzgh"  # shares 1 of its 5
    assert _dice(wanted, long_name) > _dice(wanted, short_name)
    index = NameIndex([*strong, long_name, short_name, *_fillers(4)])
    with compared_by_difflib() as seen:
        index.closest(wanted)
    assert set(seen) == {*strong, long_name}  # line 238: counts start at 0


_LONG = "abcdefghijklmnopqrstuvwxyz0123456789zyxwv"  # 41 distinct trigrams; the 41st is "wv\0"


def test_a_long_request_is_looked_up_by_its_first_40_trigrams() -> None:
    """However long the request, a query looks up at most its first 40 distinct trigrams (a
    hostile 10,000-character name costs a ``no_route`` no more index reads than a 40-character
    one): names sharing only the 41st are not ranked, one sharing the 40th is."""
    only_41st = [f"{_code(i, 2, 'moqsu')}wv" for i in range(12)]  # share "wv\0" alone
    fortieth = "mxwv"  # shares "xwv" (the 40th) too
    index = NameIndex([*only_41st, fortieth, *_fillers(4)])
    with compared_by_difflib() as seen:
        index.closest(_LONG)
    assert seen == [fortieth]  # line 103


def test_a_long_name_is_indexed_under_its_first_40_trigrams() -> None:
    """A registered name is indexed under at most its first 40 distinct trigrams (what a
    name costs the index stays bounded): a request sharing only the 41st does not reach it
    through the index, while a short name sharing the same trigram does."""
    short = "mmwv"
    index = NameIndex([_LONG, short, *_fillers(15)])
    with compared_by_difflib() as seen:
        index.closest("wv")
    assert seen == [short]  # line 103


# ------------------------------------------------------------------ SCAN: postings per query


def test_a_query_reads_postings_rarest_first_within_a_budget_of_1000() -> None:
    """A request's trigrams are looked up rarest first, and a query reads at most 1,000
    entries of the trigram index: here the request ``abc`` shares ``\\0ab`` with 400 names,
    ``abc`` with 600 and ``bc\\0`` with 700. The first two fill the budget exactly, so the
    suggestions come from them (the 600 shorter names rank first), never from the 700: a
    registry with many look-alike names still answers a ``no_route`` in bounded time."""
    starts = [f"abdefghij{_code(i, 3)}" for i in range(400)]  # only "\0ab"; 9+ trigrams
    contains = [f"dabc{_code(i, 3)}" for i in range(600)]  # only "abc"; 7 trigrams
    ends = [f"{_code(i, 3)}bc" for i in range(700)]  # only "bc\0"; 5 trigrams
    index = NameIndex([*starts, *contains, *ends])
    got = index.closest("abc")
    assert got and set(got) <= set(contains)  # lines 232, 236


def test_when_every_trigram_is_common_the_rarest_ones_first_1000_names_are_read() -> None:
    """If even the request's rarest trigram is shared by more than 1,000 names, the query reads
    the first 1,000 of them (in the order they were registered) and ranks those: the caller
    still gets suggestions spelled alike, and the 1,001st name, however close, is not read."""
    numbered = [f"ale{i:04d}" for i in range(1000)]
    index = NameIndex([*numbered, "ales"])  # 1,001 names start with "ale"
    got = index.closest("ale")
    assert len(got) == 3 and set(got) <= set(numbered)  # lines 102, 233


# ------------------------------------------------------------------ word overlaps, MAX_WORDS


def test_past_16_names_only_a_names_first_8_words_find_it_by_a_shared_word() -> None:
    """Names sharing a word with the request are suggested too. Up to 16 names every word
    counts; past that the index keeps at most 8 words per name (alphabetically first), so a
    name's 9th word alone no longer brings it in: the memory a name costs stays bounded."""
    nine_words = "alpha_bravo_charlie_delta_echo_foxtrot_golf_hotel.zulu"  # zulu is 9th
    assert closest("zulu.query", [nine_words]) == [nine_words]
    assert NameIndex([nine_words, *_fillers(15)]).closest("zulu.query") == [nine_words]
    assert NameIndex([nine_words, *_fillers(16)]).closest("zulu.query") == []  # 100, 104
    eight_words = "alpha_bravo_charlie_delta_echo_foxtrot_golf.zulu"  # zulu is 8th
    assert NameIndex([eight_words, *_fillers(16)]).closest("zulu.query") == [eight_words]


def test_a_name_sharing_two_words_with_the_request_is_suggested_once() -> None:
    """A name found through two of the request's words (here ``hr`` and ``onboard``) is one
    suggestion, not two, in a registry large enough to use the index."""
    both = "onboard_quarterly_payroll_batch.hr_team_south"
    index = NameIndex([both, *_fillers(20)])
    assert index.closest("hr.onboard") == [both]  # lines 275, 277


def test_a_query_reads_only_the_word_overlaps_it_needs() -> None:
    """Filling the three suggestions from names sharing a word stops at three: a registry
    with 1,000 names sharing the word ``sales`` costs a ``no_route`` a few dozen comparisons
    between names, not 1,000 (counted, not timed)."""
    many = [Counted(f"sales.{_code(i, 3)}") for i in range(1000)]
    index = NameIndex(many)
    Counted.comparisons = 0
    got = index.closest("sales.forecast")
    assert len(got) == 3
    assert Counted.comparisons < 300, Counted.comparisons  # line 266


# ------------------------------------------------------------------ the sorted listing


def test_listing_the_names_again_costs_no_comparisons() -> None:
    """``NameIndex.sorted`` keeps its sorted list between changes (as its docstring says,
    repeated calls cost a copy): ``Registry.capability_names`` lists from it, and so does
    every suggestion in a registry of up to 16 names; a second listing does not sort again."""
    index = NameIndex(Counted(f"{w}.query") for w in string.ascii_lowercase)
    first = index.sorted()
    Counted.comparisons = 0
    assert index.sorted() == first and list(index) == first
    assert Counted.comparisons == 0  # line 220


def test_a_name_added_or_discarded_after_a_listing_shows_in_the_next_one() -> None:
    """The kept listing is dropped on every change: a capability registered after the
    registry was last listed is in the next listing, and a forgotten one is not."""
    index = NameIndex(["sales.query", "hr.hire"])
    assert index.sorted() == ["hr.hire", "sales.query"]
    index.add("inventory.query")  # line 174
    assert index.sorted() == ["hr.hire", "inventory.query", "sales.query"]
    index.discard("hr.hire")  # line 190
    assert list(index) == ["inventory.query", "sales.query"]


# ------------------------------------------------------------------ the shortlist, as a property


@settings(max_examples=60, deadline=None)
@given(known=st.lists(_abcd, min_size=17, max_size=24, unique=True), wanted=_abcd)
def test_past_16_names_difflib_ranks_the_12_names_with_most_trigrams_in_common(
        known: list[str], wanted: str) -> None:
    """The docstring's promise, against a reference model: past 16 names, difflib compares
    the request only with the names sharing the largest share of character trigrams with it
    (Dice's coefficient over each name's first 40 distinct trigrams, ends marked), 12 at most,
    and with every name sharing any if there are no more than 12. (Under 25 names the 1,000
    postings a query may read are never exhausted.) Which names get ranked decides which
    ``no_route`` suggestions a caller sees."""
    index = NameIndex(known)
    with compared_by_difflib() as seen:
        index.closest(wanted)
    compared = {k for k in known if k[:64] in seen}
    assert len(compared) == len(seen)
    score = {k: _dice(normalize(wanted), k) for k in known}
    sharing = sorted((s for s in score.values() if s > 0), reverse=True)
    if len(sharing) <= 12:
        assert compared == {k for k, s in score.items() if s > 0}
    else:
        twelfth = sharing[11]
        assert len(compared) == 12
        assert {k for k, s in score.items() if s > twelfth} <= compared
        assert all(score[k] >= twelfth for k in compared)
