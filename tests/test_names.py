"""Capability names (reach/names.py): normalize, look-alikes and suggestions."""

from __future__ import annotations

import itertools
import random
import re
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reach.core.liveness import LivenessPolicy
from reach.core.names import EXACT, VERBS, NameIndex, closest, look_alikes, normalize, shape, words
from reach.core.registry import MAX_WARNINGS, Registry
from reach.wire.protocol import CapabilitySpec

CANONICAL = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*(\.[a-z0-9]+(_[a-z0-9]+)*)*$")


@pytest.mark.parametrize("spelling", [
    "QueryInventory", "query_inventory", "InventoryQuery", "inventory.query",
    "Inventory.Query", "inventory_query", "queryInventory", "inventory-query", "query inventory",
    "  InventoryQuery  ", "INVENTORY.QUERY", "query/inventory", "query:inventory",
])
def test_every_spelling_of_inventory_query_normalizes_alike(spelling):
    assert normalize(spelling) == "inventory.query"


@pytest.mark.parametrize(("raw", "expected"), [
    ("inventory", "inventory"),                     # one word stays one word
    ("Inventory", "inventory"),
    ("GetStockLevel", "stock_level.get"),           # verb first -> last
    ("stock_level_get", "stock_level.get"),         # verb last stays last
    ("StockLevel.Get", "stock_level.get"),          # dotted keeps its order
    ("sales.report.Send", "sales.report.send"),     # more than one dot is kept
    ("HTTPServerStart", "server_start.http"),       # acronyms split, no verb: first word
    ("summarize_document", "document.summarize"),
    ("GetReport", "report.get"),                    # both are verbs: the first one wins
    ("report_get", "get.report"),
    ("a..b", "a.b"),                                # empty dotted segments dropped
])
def test_normalize_examples(raw, expected):
    assert normalize(raw) == expected


@pytest.mark.parametrize("raw", ["", "   ", "\t\n"])
def test_normalize_refuses_empty_names(raw):
    with pytest.raises(ValueError, match="capability name is empty"):
        normalize(raw)


@pytest.mark.parametrize("raw", ["_", "-", "__", "/", " - ", ".", "..", "._."])
def test_normalize_refuses_names_without_words(raw):
    with pytest.raises(ValueError):
        normalize(raw)


def test_words_splits_every_style():
    assert words("HTTPServerStart") == ["http", "server", "start"]
    assert words(" a-b/c:d e_f.gH ") == ["a", "b", "c", "d", "e", "f", "g", "h"]
    assert words("sku2Price") == ["sku2", "price"]
    assert words("") == []


# ------------------------------------------------------------------ properties

_word = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,7}", fullmatch=True)
_sep = st.sampled_from(["", "_", "-", ".", " ", "__", "/", ":"])


@st.composite
def identifiers(draw):
    parts = draw(st.lists(_word, min_size=1, max_size=5))
    out = parts[0]
    for part in parts[1:]:
        out += draw(_sep) + part
    return out


@settings(max_examples=150, deadline=None)
@given(identifiers())
def test_normalize_is_idempotent(name):
    once = normalize(name)
    assert normalize(once) == once


@settings(max_examples=150, deadline=None)
@given(identifiers())
def test_normalize_output_is_canonical_lowercase(name):
    out = normalize(name)
    assert CANONICAL.match(out), out
    assert out.count(".") <= max(1, name.count("."))
    # No word is lost or invented, only recased, re-split and reordered.
    assert sorted(words(out)) == sorted(words(name))


_domain_word = st.from_regex(r"[a-z]{2,8}", fullmatch=True).filter(lambda w: w not in VERBS)


@settings(max_examples=150, deadline=None)
@given(verb=st.sampled_from(sorted(VERBS)),
       domain=st.lists(_domain_word, min_size=1, max_size=3))
def test_all_spellings_of_one_capability_agree(verb, domain):
    expected = f"{'_'.join(domain)}.{verb}"
    camel = "".join(w.capitalize() for w in domain)
    spellings = [
        f"{verb}_{'_'.join(domain)}",
        f"{'_'.join(domain)}_{verb}",
        verb.capitalize() + camel,
        camel + verb.capitalize(),
        verb + camel,
        f"{'-'.join(domain)}-{verb}",
        expected,
        expected.upper(),
    ]
    assert {s: normalize(s) for s in spellings} == {s: expected for s in spellings}


@settings(max_examples=100, deadline=None)
@given(identifiers(), identifiers())
def test_look_alikes_is_symmetric_and_excludes_self(a, b):
    assume(a != b)
    assert (b in look_alikes(a, [b])) == (a in look_alikes(b, [a]))
    assert look_alikes(a, [a]) == []


# ------------------------------------------------------------------ look-alikes and closest

def test_look_alikes_same_words_other_order_or_case():
    known = ["query.inventory", "Inventory.Query", "inventory.query", "inventory.update",
             "query_inventory", "inventory.query.all"]
    assert look_alikes("inventory.query", known) == [
        "Inventory.Query", "query.inventory", "query_inventory"]


def test_shape_ignores_order_and_case():
    assert shape("QueryInventory") == shape("inventory.query") == frozenset({"inventory", "query"})
    assert shape("inventory.query") != shape("inventory.update")


def test_closest_suggests_sales_query_for_a_typo():
    known = ["sales.query", "hr.hire", "sales.list", "inventory.update"]
    suggestions = closest("sales.querry", known)
    assert suggestions[0] == "sales.query"
    assert "hr.hire" not in suggestions


def test_closest_normalizes_the_wanted_name_first():
    known = ["inventory.query", "sales.query", "hr.hire"]
    assert closest("QueryInventory", known)[0] == "inventory.query"
    assert closest("inventroy.query", known)[0] == "inventory.query"


def test_closest_includes_word_overlaps_and_caps_the_count():
    known = ["sales.query", "sales.list", "sales.report", "sales.create", "hr.hire"]
    got = closest("sales.forecast", known)
    assert len(got) == 3
    assert set(got) <= {"sales.query", "sales.list", "sales.report", "sales.create"}
    assert closest("sales.forecast", known, n=1) == got[:1]
    assert len(set(got)) == len(got)


def test_closest_suggests_names_sharing_a_word_even_when_spelled_far_apart():
    known = ["hr.hire", "sales.query", "inventory.update"]
    assert closest("hr.onboard_new_contractor_quickly", known) == ["hr.hire"]


def test_closest_with_nothing_known_or_nothing_close():
    assert closest("sales.query", []) == []
    assert closest("zzz.qqq", ["hr.hire", "inventory.update"]) == []
    assert closest("   ", ["hr.hire"]) == []


# ------------------------------------------------------------------ NameIndex

def brute_closest(name, known, n=3):
    """The exhaustive answer (the module's ``closest``) that the index must give."""
    return closest(name, known, n)


def test_index_add_discard_and_set_behaviour():
    index = NameIndex(["sales.query", "hr.hire"])
    assert index.add("inventory.query") is True
    assert index.add("inventory.query") is False
    assert len(index) == 3 and "hr.hire" in index and "nope.nope" not in index
    assert list(index) == index.sorted() == ["hr.hire", "inventory.query", "sales.query"]
    assert index.discard("hr.hire") is True
    assert index.discard("hr.hire") is False
    assert index.sorted() == ["inventory.query", "sales.query"]


def test_index_forgets_everything_it_was_told():
    # No posting outlives its names: a registry that churns does not grow.
    index = NameIndex()
    spelled = [f"{d}{i}.{v}" for d in ("inventory", "sales") for i in range(30)
               for v in ("query", "update")]
    for name in spelled:
        index.add(name)
    for name in spelled:
        index.discard(name)
    assert len(index) == 0 and index.sorted() == []
    assert index._by_shape == {} and index._by_gram == {} and index._by_word == {}
    assert index.closest("inventory1.query") == [] and index.look_alikes("query.inventory1") == []


def test_index_look_alikes_and_same_shape():
    known = ["query.inventory", "inventory.query", "inventory.update", "query_inventory",
             "inventory.query.all"]
    index = NameIndex(known)
    assert index.look_alikes("inventory.query") == ["query.inventory", "query_inventory"]
    assert index.look_alikes("Inventory.Query") == look_alikes("Inventory.Query", known)
    assert list(index.same_shape("query.inventory")) == [
        "query.inventory", "inventory.query", "query_inventory"]  # in the order added
    assert set(index.same_shape("nothing.alike")) == set()


@pytest.mark.parametrize("size", [4, 100, 3000])
def test_index_closest_keeps_the_pinned_suggestions(size):
    filler = [f"zone{i}.{v}" for i in range(size) for v in ("list", "sync")][:size]
    index = NameIndex(["sales.query", "hr.hire", "sales.list", "inventory.update",
                       "inventory.query", *filler])
    assert index.closest("sales.querry")[0] == "sales.query"
    assert "hr.hire" not in index.closest("sales.querry")
    assert index.closest("QueryInventory")[0] == "inventory.query"
    assert index.closest("inventroy.query")[0] == "inventory.query"
    assert index.closest("inventry.query")[0] == "inventory.query"
    assert index.closest("hr.onboard_new_contractor_quickly") == ["hr.hire"]
    assert index.closest("zzz.qqq") == []
    assert index.closest("   ") == []
    assert index.closest("sales.forecast", n=1) == index.closest("sales.forecast")[:1]


_names = st.lists(identifiers().map(normalize), max_size=EXACT, unique=True)


@settings(max_examples=200, deadline=None)
@given(known=_names, extra=_names, wanted=identifiers(), n=st.integers(1, 4))
def test_index_closest_equals_the_exhaustive_answer_on_small_registries(known, extra, wanted, n):
    index = NameIndex([*known, *extra])
    for name in extra:  # what was discarded leaves no trace
        if name not in known:
            index.discard(name)
    assert sorted(index) == sorted(known)
    assert index.closest(wanted, n) == brute_closest(wanted, known, n)
    assert index.look_alikes(normalize(wanted)) == look_alikes(normalize(wanted), known)


@settings(max_examples=100, deadline=None)
@given(known=st.lists(identifiers().map(normalize), min_size=EXACT + 1, max_size=80,
                      unique=True),
       wanted=identifiers())
def test_index_closest_on_larger_registries_suggests_known_names_sharing_something(known,
                                                                                   wanted):
    index = NameIndex(known)
    got = index.closest(wanted)
    assert len(got) == len(set(got)) <= 3
    assert set(got) <= set(known)
    exhaustive = brute_closest(wanted, known)
    if not exhaustive:
        assert got == []  # nothing close and no word shared: nothing invented either
    if normalize(wanted) in known:
        assert got[0] == normalize(wanted)


def test_index_closest_agrees_with_the_exhaustive_answer_on_typos_at_scale():
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    domains = ["".join(rng.choice(letters) for _ in range(rng.randint(4, 10)))
               for _ in range(300)]
    known = sorted({f"{rng.choice(domains)}.{rng.choice(sorted(VERBS))}" for _ in range(2000)})
    index = NameIndex(known)
    agree = 0
    trials = 200
    for _ in range(trials):
        name = rng.choice(known)
        at = rng.randrange(len(name))
        typo = name[:at] + rng.choice(letters) + name[at + 1:]  # one letter wrong
        got, exhaustive = index.closest(typo), brute_closest(typo, known)
        assert got and got[0] in known
        agree += got[0] == exhaustive[0]
    print(f"\nindex and exhaustive top suggestions agree on {agree}/{trials} typos")
    assert agree >= 0.9 * trials


# ------------------------------------------------------------------ hostile names

def _cost(fn, name, rounds=20):
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        fn(name)
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("unit", ["aA", "A", "_", " -", "A_", ".", "a.", "AAa", "1A", "\u00e9A"])
def test_names_cost_linear_time_in_the_length_of_a_hostile_name(unit):
    def work(name):
        words(name)
        shape.__wrapped__(name)
        try:
            normalize.__wrapped__(name)
        except ValueError:
            pass
    short, long = (unit * 200)[:200], (unit * 2000)[:2000]
    ratio = _cost(work, long) / _cost(work, short)
    # Ten times the length: linear is ~10x, quadratic ~100x.
    assert ratio < 30, f"{unit!r}: {ratio:.1f}x for 10x the length"


# ------------------------------------------------------------------ the registry's warnings

POLICY = LivenessPolicy(interval=1.0, suspect_after=2.0, offline_after=3.0)
_spellings = st.sampled_from([
    "inventory.query", "query.inventory", "QueryInventory", "query_inventory", "inventory_query",
    "sales.query", "query.sales", "SalesQuery", "sales.report", "report.sales", "hr.hire",
    "hire.hr", "inventory.query.all", "all.inventory.query"])


def old_warnings(index, agent_id, spelled):
    """What ``Registry.register`` warned before the name index (each look-alike once)."""
    others = [c for c, agents in index.items() if len(agents) > 1 or agent_id not in agents]
    caps, out = [], []
    for name in spelled:
        canonical = normalize(name)
        if canonical != name:
            out.append(f"capability {name!r} registered as {canonical!r}")
        for other in sorted(set(look_alikes(canonical, [*others, *caps]))):
            out.append(f"capability {canonical!r} looks like existing {other!r}; callers "
                       f"asking for one will not reach the other")
        caps.append(canonical)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.lists(_spellings, max_size=6)),
                min_size=1, max_size=8))
def test_registry_look_alike_warnings_are_what_they_were(registrations):
    reg = Registry(POLICY)
    for agent_id, spelled in registrations:
        spelled = list({normalize(s): s for s in spelled}.values())  # one spelling per name
        index = {cap: set(declared) for cap, declared in reg.index.items()}
        expected = old_warnings(index, agent_id, spelled)
        got = reg.register(agent_id=agent_id, name=agent_id, version="1", max_concurrency=1,
                           specs=[CapabilitySpec(name=s) for s in spelled], link=None,
                           now=0.0).warnings
        if len(expected) <= MAX_WARNINGS:
            assert got == expected
        else:
            assert len(got) == MAX_WARNINGS + 1 and set(got[:-1]) <= set(expected)
            assert got[-1] == f"... and {len(expected) - MAX_WARNINGS} more warnings"
        assert reg.names.sorted() == sorted(reg.index) == reg.capability_names()


def test_a_registration_full_of_look_alikes_lists_a_few_and_counts_the_rest():
    reg = Registry(POLICY)
    words_ = [f"w{i}" for i in range(6)]
    alike = sorted({".".join(p) for p in itertools.permutations(words_)})[:300]
    reg.register(agent_id="a", name="a", version="1", max_concurrency=1, link=None, now=0.0,
                 specs=[CapabilitySpec(name=n) for n in alike[:150]])
    out = reg.register(agent_id="b", name="b", version="1", max_concurrency=1, link=None,
                       now=0.0, specs=[CapabilitySpec(name=n) for n in alike[150:]])
    # Each of b's 150 names looks like a's 150 and b's own earlier ones.
    total = sum(150 + i for i in range(150))
    assert len(out.warnings) == MAX_WARNINGS + 1
    assert out.warnings[-1] == f"... and {total - MAX_WARNINGS} more warnings"
    assert all("looks like existing" in w for w in out.warnings[:-1])
    # Re-registering the same names: a's are still others', b's own earlier ones are not.
    again = reg.register(agent_id="b", name="b", version="1", max_concurrency=1, link=None,
                         now=1.0, specs=[CapabilitySpec(name=n) for n in alike[150:]])
    assert again.warnings[-1] == f"... and {total - MAX_WARNINGS} more warnings"
