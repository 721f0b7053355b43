"""Capability names (reach/names.py): normalize, look-alikes and suggestions."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reach.names import VERBS, closest, look_alikes, normalize, shape, words

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
