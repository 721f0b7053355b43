"""Tests that pin behaviour of reach/core/schemas.py which the mutation run showed unpinned.

The bounds on hostile schemas and params are measured here without a wall clock: the checks'
CPU budget runs on an injected clock (``check(..., clock=...)``), and the limits are pinned at
their documented values, one unit either side.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest
import re2  # type: ignore[import-untyped]
from depth import shallow_recursion
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core import schemas
from reach.core.schemas import SchemaError, check, compile_schema, schema_text, violation

LIST_OF_INTS = {"type": "array", "items": {"type": "integer"}}


class Ticks:
    """A fake CPU clock: each read advances it by ``tick`` seconds, and reads are counted.
    Powers of two keep the sums exact."""

    def __init__(self, tick: float = 1 / 1024) -> None:
        self.now = 0.0
        self.reads = 0
        self.tick = tick

    def __call__(self) -> float:
        self.reads += 1
        self.now += self.tick
        return self.now


def reads(schema: dict[str, Any], params: Any) -> int:
    clock = Ticks(tick=0.0)
    assert check(compile_schema(schema), params, clock=clock) is None
    return clock.reads


# --- the CPU budget -------------------------------------------------------------------------


def test_the_clock_is_read_once_every_256_steps_and_never_for_small_params() -> None:
    """thread_time is a system call: a check of small params (the common case) must not pay
    for it, and a long one pays once per 256 steps (a step is one subschema checked; a list of
    n integers is n + 1 steps)."""
    assert reads(LIST_OF_INTS, list(range(254))) == 0
    assert reads(LIST_OF_INTS, list(range(255))) == 1
    assert reads(LIST_OF_INTS, list(range(511))) == 2
    assert reads(LIST_OF_INTS, list(range(256 * 10 - 1))) == 10


def test_every_subschema_entered_is_a_step_even_an_empty_one() -> None:
    """Steps count subschemas entered, however little they check: an item checked against
    ``allOf`` of three empty schemas is four steps (its own and three), so 64 items are 257
    steps in all, one look at the clock."""
    three = {"type": "array", "items": {"allOf": [{}, {}, {}]}}
    assert reads(three, list(range(63))) == 0
    assert reads(three, list(range(64))) == 1
    assert reads(three, list(range(1000))) == 15


def test_unique_items_spends_one_step_per_item_in_blocks_of_4096() -> None:
    """uniqueItems over a long list is budgeted too: one clock look per 4,096 items, so a
    1 MB list of colliding numbers is cut by the budget, not run to the end."""
    unique = {"type": "array", "uniqueItems": True}
    assert reads(unique, []) == 0
    assert reads(unique, [0]) == 1
    assert reads(unique, list(range(4096))) == 1
    assert reads(unique, list(range(4097))) == 2
    assert reads(unique, list(range(3 * 4096 + 1))) == 4


def test_a_check_past_its_budget_is_refused_at_the_first_look_after_it() -> None:
    """The budget starts at the first look at the clock; the check is refused at the first
    look that finds it spent, with a reason that tells the caller what to do."""
    v = compile_schema(LIST_OF_INTS)
    budget = 20 / 1024  # 20 ticks after the first look
    # 21 looks: the last one is exactly at the deadline, which is still within budget.
    assert check(v, list(range(21 * 256 - 1)), max_seconds=budget, clock=Ticks()) is None
    reason = check(v, list(range(22 * 256 - 1)), max_seconds=budget, clock=Ticks())
    assert reason == ("params are too costly to validate against this schema; "
                      "send smaller params")
    assert check(v, list(range(22 * 256 - 1)), max_seconds=2 * budget, clock=Ticks()) is None


def test_the_default_budget_is_twenty_milliseconds() -> None:
    """MAX_CHECK_SECONDS is the default of check and violation (20 ms of CPU)."""
    v = compile_schema(LIST_OF_INTS)
    ms = 1 / 1000  # not exact in binary: 20 and 22 looks stay clear of the deadline's edge
    within, beyond = list(range(20 * 256 - 1)), list(range(22 * 256 - 1))
    assert check(v, within, clock=Ticks(ms)) is None
    assert check(v, beyond, clock=Ticks(ms)) is not None
    assert violation(v, within, clock=Ticks(ms)) is None
    assert violation(v, beyond, clock=Ticks(ms)) == (
        "$", "params are too costly to validate against this schema; send smaller params")


def test_each_check_gets_a_fresh_budget() -> None:
    """A validator is shared by every agent declaring the schema: one check's spent budget
    (or its step count) must not carry over into the next check."""
    v = compile_schema(LIST_OF_INTS)
    clock = Ticks()
    assert check(v, list(range(22 * 256 - 1)), max_seconds=20 / 1024, clock=clock) is not None
    assert check(v, list(range(254)), max_seconds=20 / 1024, clock=clock) is None
    assert check(v, list(range(21 * 256 - 1)), max_seconds=20 / 1024, clock=Ticks()) is None
    fresh = Ticks(0.0)
    check(v, list(range(200)), clock=fresh)
    check(v, list(range(54)), clock=fresh)
    assert fresh.reads == 0  # 201 + 55 steps, but in two checks


class Paused(Ticks):
    """A fake CPU clock whose reads listed in ``at`` (1 = the first) each find that a full
    garbage collection just ran and took ``pause`` seconds of this thread's CPU."""

    def __init__(self, at: tuple[int, ...], pause: float = 0.5) -> None:
        super().__init__()
        self.at, self.pause = at, pause

    def __call__(self) -> float:
        if self.reads + 1 in self.at:
            gc.collect()
            self.now += self.pause
        return super().__call__()


def test_a_full_garbage_collection_inside_a_check_is_not_its_cost() -> None:
    """A 0.5 s full collection at the second look would refuse params that fit (the
    coordinator's pause in docs/adapters.md is 40-95 ms, against a 20 ms budget): the check
    gets its budget again from that look, and the params pass."""
    v = compile_schema(LIST_OF_INTS)
    params = list(range(21 * 256 - 1))  # 21 looks: 20 ticks, within a budget of 20 ticks
    assert check(v, params, max_seconds=20 / 1024, clock=Paused(at=(2,))) is None
    assert violation(v, params, max_seconds=20 / 1024, clock=Paused(at=(2,))) is None
    # Without a collection, the same pause is the check's own, and refused.
    assert check(v, params, max_seconds=20 / 1024, clock=Ticks(0.5)) is not None


def test_a_check_gets_its_budget_again_once_not_at_every_collection() -> None:
    """So a check costs at most twice its budget, whatever the collector does."""
    v = compile_schema(LIST_OF_INTS)
    reason = check(v, list(range(21 * 256 - 1)), max_seconds=20 / 1024,
                   clock=Paused(at=(2, 3)))
    assert reason is not None and "too costly" in reason
    # The second budget runs from the look that found the collection (the second), 20 ticks:
    # to the 22nd look, exactly at its deadline; one look more is refused.
    assert check(v, list(range(22 * 256 - 1)), max_seconds=20 / 1024,
                 clock=Paused(at=(2,))) is None
    assert check(v, list(range(23 * 256 - 1)), max_seconds=20 / 1024,
                 clock=Paused(at=(2,))) is not None


def test_violation_is_budgeted_like_check() -> None:
    """Results (``returns``) are checked with the same budget, and say where: the root."""
    v = compile_schema(LIST_OF_INTS)
    assert violation(v, list(range(22 * 256 - 1)), max_seconds=20 / 1024,
                     clock=Ticks()) == (
        "$", "params are too costly to validate against this schema; send smaller params")
    assert violation(v, list(range(22 * 256 - 1)), max_seconds=1.0, clock=Ticks()) is None


@pytest.mark.parametrize("n", [0, 1])
def test_small_params_never_look_at_the_clock_whatever_the_schema(n: int) -> None:
    clock = Ticks()
    assert check(compile_schema({"type": "object"}), {"a": n}, clock=clock) is None
    assert clock.reads == 0


# --- the documented limits, one unit either side ---------------------------------------------


def description_of_size(size: int, char: str = "x") -> dict[str, Any]:
    """A schema whose canonical JSON text is ``size`` bytes of UTF-8."""
    base = len(schema_text({"type": "object", "description": ""}))
    width = len(char.encode())
    assert (size - base) % width == 0
    return {"type": "object", "description": char * ((size - base) // width)}


def test_a_schema_may_be_8_kib_of_json_and_not_a_byte_more() -> None:
    """docs/protocol.md and docs/security.md promise 8 KiB (`max_schema_bytes`)."""
    assert check(compile_schema(description_of_size(8192)), {}) is None
    with pytest.raises(SchemaError, match="is 8193 bytes of JSON, over the limit of 8192"):
        compile_schema(description_of_size(8193))


def test_the_size_limit_counts_utf8_bytes_of_unescaped_text() -> None:
    """Non-ASCII text counts as its UTF-8 bytes (é is 2), not as the 6 of a \\u escape: a
    schema in Chinese or French is not refused for being 3 times its real size."""
    assert schema_text({"d": "é中"}) == '{"d":"é中"}'
    assert check(compile_schema(description_of_size(8192, "é")), {}) is None
    with pytest.raises(SchemaError, match="is 8194 bytes"):
        compile_schema(description_of_size(8194, "é"))


def test_a_schema_may_be_32_levels_deep_and_not_one_more() -> None:
    """The documented depth (docs/protocol.md: 32 levels); an object and its ``properties``
    map are two levels."""
    def nested(levels: int) -> dict[str, Any]:
        deep: dict[str, Any] = {"type": "string"}
        for _ in range(levels):
            deep = {"type": "object", "properties": {"a": deep}}
        return deep

    assert compile_schema(nested(15))  # the innermost schema is on level 31
    with pytest.raises(SchemaError, match="nested deeper than 32 levels"):
        compile_schema(nested(16))


def test_depth_counts_lists_and_schema_valued_keywords_one_level_each() -> None:
    """``allOf`` lists and ``not`` values nest as deeply as ``properties`` do: a schema
    cannot dodge the depth limit by nesting through them."""
    def through_lists(levels: int) -> dict[str, Any]:
        deep: dict[str, Any] = {}
        for _ in range(levels):
            deep = {"allOf": [deep]}  # the list is a level, its item another
        return deep

    def through_not(levels: int) -> dict[str, Any]:
        deep: dict[str, Any] = {}
        for _ in range(levels):
            deep = {"not": deep}
        return deep

    assert compile_schema(through_lists(2), max_depth=5)
    with pytest.raises(SchemaError, match="nested deeper than 5 levels"):
        compile_schema(through_lists(3), max_depth=5)
    assert compile_schema(through_not(4), max_depth=5)
    with pytest.raises(SchemaError, match="nested deeper than 5 levels"):
        compile_schema(through_not(5), max_depth=5)
    data = {"enum": [[[[[1]]]]]}  # data nests too: the enum's list and four more
    assert compile_schema(data, max_depth=6)
    with pytest.raises(SchemaError, match="nested deeper than 5 levels"):
        compile_schema(data, max_depth=5)


# --- the walk that refuses remote references, on its own --------------------------------------


class _FetchAnything(dict[str, Any]):
    """A resolver handler table that would "fetch" every URI (as an empty schema): with it in
    place of schemas._NO_REMOTE, only the walk before compiling stands between a schema and
    a fetch, so these tests see that walk refuse on its own (defence in depth)."""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Any:
        return lambda uri: {}


@pytest.fixture
def walk_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schemas, "_NO_REMOTE", _FetchAnything())


REMOTE = {"$ref": "http://127.0.0.1:9/s.json"}


@pytest.mark.parametrize("schema", [
    REMOTE,
    {"anyOf": [{"type": "string"}, REMOTE]},  # inside a list of schemas
    {"not": REMOTE},  # inside a schema-valued keyword
    {"properties": {"a": {"type": "integer"}}, "allOf": [{}], "items": {"not": REMOTE}},
    {"allOf": [{}], "properties": {"a": {"items": [{}, REMOTE]}}},  # after a list was walked
    {"properties": {"a": REMOTE}, "allOf": [{}]},  # the list is walked first, then "a"
])
def test_the_walk_alone_refuses_a_remote_ref_wherever_it_is(walk_only: None,
                                                            schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError, match=r"only local '#/\.\.\.' \$ref are allowed"):
        compile_schema(schema)


@pytest.mark.parametrize("base", [
    "urn:example:root",  # a scheme and no host
    "//evil.example/root.json",  # a host and no scheme
    "https://evil.example/root.json",
])
def test_an_id_with_a_scheme_or_a_host_is_a_remote_base(base: str) -> None:
    with pytest.raises(SchemaError, match="may not name a remote base URI"):
        compile_schema({"$id": base, "type": "object"})
    assert compile_schema({"$id": "#root", "type": "object"})


# --- RE2: memory, captures, errors and the longest string one pattern may search -----------


def largest(fits: Callable[[int], bool], lo: int, hi: int, hint: int) -> int:
    """The largest n in [lo, hi) with fits(n), fits being true up to a point and false after:
    ``hint`` (where it was with the RE2 of the day) when it still is, else searched for."""
    if fits(hint) and not fits(hint + 1):
        return hint
    assert fits(lo) and not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def re2_fits(pattern: str, max_mem: int) -> bool:
    options = re2.Options()
    options.log_errors, options.never_capture, options.max_mem = False, True, max_mem
    try:
        re2.compile(pattern, options)
    except re2.error:
        return False
    return True


def test_a_pattern_may_use_8_mib_of_re2_memory_and_no_more() -> None:
    """A pattern's compiled program is bounded (8 MiB, docs/security.md's RE2 limits): the
    largest pattern RE2 builds within 8 MiB is accepted, the next one refused, by name."""
    def pattern(k: int) -> str:  # k repetitions of a wide class, in under 1 KB of text
        return "[^x]{1000}" * (k // 1000) + f"[^x]{{{k % 1000}}}"

    k = largest(lambda k: re2_fits(pattern(k), 8 << 20), 30_000, 90_000, 58_249)
    assert compile_schema({"type": "string", "pattern": pattern(k)})
    with pytest.raises(SchemaError, match="is not supported: pattern too large"):
        compile_schema({"type": "string", "pattern": pattern(k + 1)})


def test_the_regex_format_compiles_a_value_within_256_kib() -> None:
    """A value checked as ``format: regex`` is compiled with a smaller RE2 budget (256 KiB):
    data, unlike a schema, arrives on every call."""
    v = compile_schema({"type": "string", "format": "regex"})

    def value(k: int) -> str:  # about k instructions, in a few hundred characters
        return "[a-z0-9]{1000}" * (k // 1000) + f"b{{{k % 1000}}}"

    k = largest(lambda k: re2_fits(value(k), 256 << 10), 0, 20_000, 7_787)
    assert check(v, value(k)) is None
    assert check(v, value(k + 1)) == "data must be regex"


def test_the_regex_format_takes_values_up_to_4096_characters() -> None:
    v = compile_schema({"type": "string", "format": "regex"})
    assert check(v, "a" * 4096) is None
    assert check(v, "a" * 4097) == "data must be regex"


def test_a_pattern_searches_strings_up_to_four_million_over_its_program_size() -> None:
    """One search costs at most (string length x program size) steps: a pattern may search a
    string of up to 4,000,000 // size characters; a longer one is refused, saying so, rather
    than searched."""
    assert re2.compile("a{37}").programsize == 41  # 4,000,000 // 41 = 97,560
    v = compile_schema({"type": "string", "pattern": "a{37}"})
    assert check(v, "a" * 37 + "b" * (97_560 - 37)) is None
    assert check(v, "b" * 97_560) == "data must match pattern a{37}"
    assert check(v, "a" * 97_561) == (
        "a 97561-character string is too long to check against pattern 'a{37}' "
        "(at most 97560)")


def test_capture_groups_do_not_shorten_the_strings_a_pattern_may_search() -> None:
    """Checks only ask yes or no, so groups capture nothing and cost no program size: the
    same pattern with and without groups searches strings of the same length."""
    with_groups = compile_schema({"type": "string", "pattern": "(a)(b)"})
    without = compile_schema({"type": "string", "pattern": "(?:a)(?:b)"})
    text = "ab" + "x" * 500_000  # over 4,000,000 // 10, the size with captures
    assert check(with_groups, text) is None and check(without, text) is None


def test_a_refused_pattern_writes_nothing_to_the_coordinators_stderr(
        capfd: pytest.CaptureFixture[str]) -> None:
    """RE2 logs parse errors to stderr unless told not to: an agent registering broken
    patterns in a loop would fill the coordinator's logs with C++ lines."""
    for pattern in ("(", "a\\", "[z-a]"):
        with pytest.raises(SchemaError, match="patterns use RE2 syntax"):
            compile_schema({"type": "string", "pattern": pattern})
    v = compile_schema({"type": "string", "format": "regex"})
    assert check(v, "(") == "data must be regex"
    assert capfd.readouterr().err == ""


def test_a_pattern_ending_in_a_backslash_is_refused_as_a_pattern() -> None:
    """A lone trailing backslash is RE2's "trailing \\" error, naming the pattern, not an
    internal error of the translation to RE2."""
    with pytest.raises(SchemaError) as refused:
        compile_schema({"type": "string", "pattern": "abc\\"})
    assert str(refused.value).startswith("pattern 'abc\\\\' is not supported: trailing \\;")


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_a_schema_with_a_number_json_cannot_write_is_refused(number: float) -> None:
    """NaN and infinities are not JSON: such a schema could not be sent to another agent or
    stored, so registration refuses it rather than accept what only Python can read."""
    with pytest.raises(SchemaError, match="params schema is not plain JSON"):
        compile_schema({"type": "number", "maximum": number})


@pytest.mark.parametrize("pattern", [5, None, ["a"]])
def test_a_pattern_that_is_not_a_string_is_refused_saying_so(pattern: object) -> None:
    """The agent's author reads what is wrong with the schema, not an internal TypeError."""
    for schema in ({"type": "string", "pattern": pattern},
                   {"type": "object", "properties": {"a": {"pattern": pattern}}}):
        with pytest.raises(SchemaError) as refused:
            compile_schema(schema)
        assert str(refused.value) == f"pattern must be a string, not {pattern!r}"


@pytest.mark.parametrize("fmt", ["email", "idn-email"])
def test_an_email_domain_needs_a_dot_inside_it_not_at_its_ends(fmt: str) -> None:
    """The hand-written (linear) email checks agree with fastjsonschema's regexes where a
    one-letter label sits next to the domain's dot."""
    v = compile_schema({"type": "string", "format": fmt})
    for good in ("a@b.co", "a@bc.d"):
        assert check(v, good) is None, good
    for bad in ("a@.bc", "a@bc.", "a@bc"):
        assert check(v, bad) == f"data must be {fmt}", bad


# --- uniqueItems keeps JSON's equality --------------------------------------------------------


def json_equal(a: Any, b: Any) -> bool:
    """JSON Schema's equality, from its definition: numbers by value (1 == 1.0), booleans and
    null only equal to themselves, strings to strings, arrays item by item, objects key by key."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def all_distinct(items: list[Any]) -> bool:
    """No two items equal as JSON values: what uniqueItems should accept."""
    return not any(json_equal(items[i], items[j]) for i in range(len(items)) for j in range(i))


SCALARS = st.sampled_from([True, False, None, 0, 1, -1, 0.0, 1.0, 1.5, 1e300, int(1e300),
                           "1", "true", "null", "1.0", "", "e"])
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["a", "e", "1"]), inner, max_size=2),
                    max_leaves=6)


@settings(max_examples=100, deadline=None)
@given(st.lists(JSON, max_size=6))
def test_unique_items_agrees_with_json_equality(items: list[Any]) -> None:
    """uniqueItems refuses a list exactly when two of its items are equal as JSON values: a
    true is not a 1, a null is not "null", 1e300 inside a list equals the integer it is."""
    unique = all_distinct(items)
    v = compile_schema({"type": "array", "uniqueItems": True})
    assert (check(v, items) is None) is unique


@pytest.mark.parametrize("items", [
    [True, None], [False, None], [True, False], [None, "null"], [[1e300], [int(1e300)]],
])
def test_unique_items_edge_cases(items: list[Any]) -> None:
    unique = all_distinct(items)
    assert (check(compile_schema({"type": "array", "uniqueItems": True}), items) is None) \
        is unique


# --- patternProperties, required, drafts --------------------------------------------------------


def test_pattern_properties_spend_a_step_per_key_and_per_match() -> None:
    """Each key of an object under ``patternProperties`` is a step, and each pattern it
    matches another (its subschema): 300 keys matching one pattern are 601 steps with the
    object's own, two looks at the clock; an empty ``patternProperties`` costs nothing a key."""
    keys = {f"k{n}": n for n in range(300)}
    assert reads({"type": "object", "patternProperties": {"^k": {}}}, keys) == 2
    assert reads({"type": "object", "patternProperties": {}}, keys) == 0


def test_required_names_need_no_pattern_when_other_properties_are_allowed() -> None:
    """Only ``additionalProperties: false`` makes a required name that no pattern matches
    impossible; without it (the default allows any) the schema is fine and ``required`` holds."""
    v = compile_schema({"type": "object", "patternProperties": {"^x-": {}}, "required": ["id"]})
    assert check(v, {"id": 1}) is None
    assert check(v, {"x-a": 1}) == "data must contain ['id'] properties"


def test_required_names_are_tested_against_patterns_with_re2_only() -> None:
    r"""With ``additionalProperties: false``, upstream tests each required name against the
    patterns with Python's ``re`` while compiling; here RE2 does it, so an RE2 pattern that
    Python cannot read (``\pL``, letters) works, and no backtracking runs at registration."""
    v = compile_schema({"type": "object", "patternProperties": {r"^\pL+$": {}},
                        "additionalProperties": False, "required": ["abc"]})
    assert check(v, {"abc": 1}) is None
    assert check(v, {"abc": 1, "a1": 2}) is not None


@pytest.mark.parametrize("draft, checked", [
    ("http://json-schema.org/draft-04/schema#", False),
    ("http://json-schema.org/draft-06/schema#", False),
    ("http://json-schema.org/draft-07/schema#", False),
    ("https://json-schema.org/draft/2019-09/schema", True),
    (None, True),  # no $schema: 2019-09, as fastjsonschema picks
])
def test_the_draft_a_schema_names_decides_its_formats(draft: str | None, checked: bool) -> None:
    """``uuid`` and ``duration`` are formats of 2019-09: a schema written for an older draft
    does not suddenly refuse params its author's tools accepted."""
    schema: dict[str, Any] = {"type": "string", "format": "uuid"}
    if draft:
        schema["$schema"] = draft
    assert (check(compile_schema(schema), "not-a-uuid") is not None) is checked


# --- violation: where a result does not fit ------------------------------------------------------


def test_violation_names_the_path_of_the_first_misfit_and_why() -> None:
    """A result that does not fit its ``returns`` schema is reported with a JSON path from
    the root ($), so the agent's author finds the field at once."""
    v = compile_schema({"type": "object", "properties": {"items": {"type": "array", "items": {
        "type": "object", "properties": {"q": {"type": "integer"}}}}}})
    assert violation(v, {"items": [{"q": 1}, {"q": 2}]}) is None
    assert violation(v, {"items": [{"q": 1}, {"q": "x"}]}) == (
        "$.items[1].q", "data.items[1].q must be integer")
    assert violation(v, []) == ("$", "data must be object")


def test_violation_of_a_value_too_deep_or_too_large_is_at_the_root() -> None:
    tree = compile_schema({"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
                           "$ref": "#/$defs/t"})
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    with shallow_recursion():
        assert violation(tree, deep) == ("$", "nested too deeply to validate")
    half = compile_schema({"type": "number", "multipleOf": 0.5})
    found = violation(half, 10**400)  # past any float: the division overflows
    assert found is not None and found[0] == "$"
    assert found[1].startswith("cannot be validated: ")
