"""JSON-schema params (reach/schemas.py): schema_of, compile_schema, check."""

from __future__ import annotations

import pytest
from depth import shallow_recursion
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from tracer import SLOWDOWN

from reach.core.schemas import SchemaError, check, compile_schema, schema_of

SCHEMA = {
    "type": "object",
    "properties": {"sku": {"type": "string", "minLength": 1},
                   "qty": {"type": "integer", "minimum": 0}},
    "required": ["sku"],
    "additionalProperties": False,
}


class Order(BaseModel):
    sku: str
    qty: int = 1


def test_schema_of_none_accepts_any_object():
    assert schema_of(None) == {"type": "object"}
    v = compile_schema(schema_of(None))
    assert check(v, {"anything": [1, 2]}) is None
    assert check(v, [1, 2]) is not None  # params are always an object


def test_schema_of_dict_is_passed_through():
    assert schema_of(SCHEMA) is SCHEMA


def test_schema_of_pydantic_model():
    schema = schema_of(Order)
    assert schema["type"] == "object"
    assert schema["required"] == ["sku"]
    assert set(schema["properties"]) == {"sku", "qty"}
    v = compile_schema(schema)
    assert check(v, {"sku": "A", "qty": 2}) is None
    assert "sku" in check(v, {"qty": 2})


@pytest.mark.parametrize("bad", ["{}", 42, ["type", "object"], object()])
def test_schema_of_refuses_other_things(bad):
    with pytest.raises(TypeError, match="params must be a JSON schema dict or a pydantic model"):
        schema_of(bad)


def test_check_accepts_valid_and_explains_invalid_in_one_line():
    v = compile_schema(SCHEMA)
    assert check(v, {"sku": "A-1", "qty": 3}) is None
    cases = {
        "missing": check(v, {"qty": 3}),
        "type": check(v, {"sku": 5}),
        "minimum": check(v, {"sku": "A", "qty": -1}),
        "extra": check(v, {"sku": "A", "colour": "red"}),
    }
    for name, reason in cases.items():
        assert isinstance(reason, str) and reason, name
        assert "\n" not in reason, name
    assert "sku" in cases["missing"]
    assert "string" in cases["type"]
    assert "0" in cases["minimum"]


def test_compile_is_shared_by_schema_text_regardless_of_key_order():
    a = compile_schema({"type": "object", "required": ["x"]})
    b = compile_schema({"required": ["x"], "type": "object"})
    c = compile_schema({"type": "object", "required": ["y"]})
    assert a is b
    assert a is not c


@pytest.mark.parametrize("schema", [
    {"type": "nonsense"}, {"type": "integer", "minimum": "zero"}, {"$ref": "#/nowhere"},
])
def test_broken_schema_is_a_schema_error(schema):
    with pytest.raises(SchemaError, match="invalid params schema"):
        compile_schema(schema)


def test_schema_error_is_a_value_error():
    assert issubclass(SchemaError, ValueError)


@settings(max_examples=100, deadline=None)
@given(sku=st.one_of(st.text(max_size=5), st.integers(), st.none()),
       qty=st.one_of(st.integers(min_value=-5, max_value=5), st.text(max_size=2)))
def test_check_agrees_with_the_rule(sku, qty):
    v = compile_schema(SCHEMA)
    ok = isinstance(sku, str) and len(sku) >= 1 and isinstance(qty, int) and qty >= 0
    assert (check(v, {"sku": sku, "qty": qty}) is None) is ok


# --- bounded compile and check (no fetches, no ReDoS, no super-linear keywords) -------------

import re  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import fastjsonschema  # noqa: E402
from fastjsonschema.draft2019 import CodeGeneratorDraft2019  # noqa: E402

from reach.core import schemas  # noqa: E402
from reach.core.schemas import (  # noqa: E402
    MAX_CHECK_SECONDS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    schema_text,
)

# Seconds: every hostile check below must finish well inside one probe stall. Counted in this
# thread's CPU time, as the checks' own budget is: time the machine gave other processes is not
# the check's. Doubled under coverage's tracer (tests/tracer.py): the colliding-hashes check
# measured 53.5 ms in a CI run under coverage; a quadratic one would take seconds.
FAST = 0.05 * SLOWDOWN


def timed(fn, *args):
    started = time.thread_time()
    result = fn(*args)
    return result, time.thread_time() - started


@pytest.mark.parametrize("ref", [
    "http://127.0.0.1:9/s.json", "https://example.com/s.json#/a", "file:///etc/passwd",
    "other.json", "//evil.example/s.json", "ftp://x/y",
])
def test_non_local_ref_is_refused_before_compiling(ref):
    nested = {"type": "object", "properties": {"a": {"anyOf": [{"$ref": ref}]}}}
    for schema in ({"$ref": ref}, nested):
        with pytest.raises(SchemaError, match=r"only local '#/\.\.\.' \$ref are allowed; got"):
            compile_schema(schema)


@pytest.mark.parametrize("key", ["$id", "id"])
def test_remote_base_uri_is_refused(key):
    with pytest.raises(SchemaError, match="may not name a remote base URI"):
        compile_schema({key: "http://evil.example/root.json", "type": "object"})


def test_local_refs_and_properties_named_like_keywords_work():
    schema = {
        "$defs": {"sku": {"type": "string", "pattern": "^[A-Z]-[0-9]+$"}},
        "definitions": {"qty": {"type": "integer", "minimum": 0}},
        "type": "object",
        "properties": {
            "$ref": {"$ref": "#/$defs/sku"},
            "$id": {"$ref": "#/definitions/qty"},
            "id": {"type": "string", "const": "http://not-fetched.example/"},
            "same": {"$ref": "#/properties/id"},
        },
        "required": ["$ref", "id"],
    }
    v = compile_schema(schema)
    ok = {"$ref": "A-1", "$id": 2, "id": "http://not-fetched.example/"}
    assert check(v, ok) is None
    assert "must match pattern" in check(v, {**ok, "$ref": "a-1"})
    assert check(v, {**ok, "$id": -1}) is not None


def test_resolver_handlers_refuse_every_scheme_even_past_the_walk(monkeypatch):
    def no_urlopen(*args, **kwargs):
        raise AssertionError("the coordinator tried to open a URL")

    monkeypatch.setattr("urllib.request.urlopen", no_urlopen)
    monkeypatch.setattr(schemas, "_audit", lambda schema, max_depth: None)
    for uri in ("http://127.0.0.1:9/s.json", "file:///etc/passwd", "made-up-scheme:x"):
        with pytest.raises(SchemaError, match="only local"):
            compile_schema({"$ref": uri})
    assert "anything" in schemas._NO_REMOTE


def test_schema_over_the_byte_limit_says_the_limit_and_the_size():
    schema = {"type": "object", "description": "x" * MAX_SCHEMA_BYTES}
    size = len(schema_text(schema))
    with pytest.raises(SchemaError, match=f"{size} bytes of JSON, over the limit of "
                                          f"{MAX_SCHEMA_BYTES}"):
        compile_schema(schema)
    assert check(compile_schema(schema, max_bytes=size), {}) is None


def test_schema_over_the_depth_limit_is_refused():
    deep: dict = {"type": "string"}
    for _ in range(MAX_SCHEMA_DEPTH // 2):  # each level is an object and its properties map
        deep = {"type": "object", "properties": {"a": deep}}
    with pytest.raises(SchemaError, match=f"nested deeper than {MAX_SCHEMA_DEPTH} levels"):
        compile_schema(deep)
    assert compile_schema(deep, max_depth=MAX_SCHEMA_DEPTH + 1)
    very_deep: dict = {}
    for _ in range(5000):  # past the interpreter's recursion limit
        very_deep = {"not": very_deep}
    with pytest.raises(SchemaError, match="nested too deeply"):
        compile_schema(very_deep)


def test_schema_that_is_not_json_is_a_schema_error():
    with pytest.raises(SchemaError, match="not plain JSON"):
        compile_schema({"type": "object", "default": object()})


@pytest.mark.parametrize("schema", [
    {"properties": []}, {"items": 5}, {"pattern": 5}, {"allOf": 5}, {"not": 5},
    {"dependencies": 5}, {"patternProperties": {"[": {}}}, {"patternProperties": []},
])
def test_malformed_schema_is_a_schema_error_not_a_crash(schema):
    with pytest.raises(SchemaError):
        compile_schema(schema)


def test_redos_pattern_runs_in_linear_time():
    v = compile_schema({"type": "string", "pattern": "^(a+)+$"})
    for attack in ("a" * 31 + "!", "a" * 100_000 + "!"):
        reason, took = timed(check, v, attack)
        assert "must match pattern ^(a+)+$" in reason
        assert took < FAST
    assert check(v, "aaaa") is None


@pytest.mark.parametrize("pattern, why", [
    (r"^(a)\1$", "invalid escape"), (r"^(?=a)", "perl operator"), ("(?<!a)b", "perl operator"),
    ("[", "missing ]"), ("a{1001}", "repetition"),
])
def test_patterns_re2_cannot_run_are_refused_naming_the_pattern(pattern, why):
    for schema in ({"type": "string", "pattern": pattern},
                   {"type": "object", "patternProperties": {pattern: {}}}):
        with pytest.raises(SchemaError) as refused:
            compile_schema(schema)
        message = str(refused.value)
        assert repr(pattern) in message and why in message
        assert "RE2 syntax" in message and "linear time" in message


@pytest.mark.parametrize("pattern, good, bad", [
    ("^[a-z]+$", ["abc"], ["abc\n", "Abc", "", "ab1"]),
    (r"\d{3}", ["123", "x1234y"], ["12", "1x2"]),  # JSON-schema patterns are unanchored
    ("b", ["abc"], ["ac"]),
    (r"^a\Z", ["a"], ["a\n", "ab"]),  # Python's \Z kept working
    (r"^\u00e9+$", ["éé"], ["e"]),  # ECMA-262 \uXXXX
    ("^[$]+$", ["$$"], ["a"]),  # upstream's $ -> \Z rewrite broke this one
    ("(?i)^ab$", ["AB"], ["abc"]),
])
def test_normal_patterns_behave_as_before(pattern, good, bad):
    v = compile_schema({"type": "string", "pattern": pattern})
    for text in good:
        assert check(v, text) is None, text
    for text in bad:
        assert check(v, text) is not None, text


def test_pattern_properties_use_re2_and_keep_their_meaning():
    v = compile_schema({"type": "object", "patternProperties": {"^x-(a+)+$": {"type": "integer"}},
                        "additionalProperties": False})
    assert check(v, {"x-aaa": 1}) is None
    assert "must be integer" in check(v, {"x-aaa": "1"})
    reason, took = timed(check, v, {"x-" + "a" * 50_000 + "!": 1})
    assert "must not contain" in reason and took < FAST


def test_required_name_tested_against_pattern_properties_with_re2_at_compile_time():
    hostile = {"type": "object", "patternProperties": {"^(a+)+$": {}},
               "additionalProperties": False, "required": ["a" * 40 + "!"]}
    with pytest.raises(SchemaError, match="required but not allowed"), \
            _within(FAST):
        compile_schema(hostile)
    fine = dict(hostile, required=["aaaa"])
    assert check(compile_schema(fine), {"aaaa": 1}) is None
    assert "must contain" in check(compile_schema(fine), {})


def test_long_string_against_a_costly_pattern_is_refused_not_searched():
    v = compile_schema({"type": "string", "pattern": "(?:[ab]*a[ab]{60})+c"})
    reason, took = timed(check, v, "ab" * 500_000)
    assert "too long to check against pattern" in reason and took < FAST
    assert check(v, "a" + "b" * 60 + "c") is None


class _within:
    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        self.started = time.perf_counter()

    def __exit__(self, *exc):
        assert time.perf_counter() - self.started < self.seconds
        return False


HOSTILE_STRINGS = [
    "a@" + ".a" * 500_000 + "@", "a" * 1_000_000 + "!", "/a" * 500_000 + "~",
    "a." * 500_000 + "-", "0:" * 500_000, "P" + "1Y" * 500_000, "(" * 1_000_000,
]


@pytest.mark.parametrize("fmt", sorted(CodeGeneratorDraft2019.FORMAT_REGEXS) + ["regex"])
def test_every_format_check_is_linear_on_1mb_hostile_strings(fmt):
    v = compile_schema({"type": "string", "format": fmt})
    for text in HOSTILE_STRINGS:
        _, took = timed(check, v, text)
        assert took < FAST, (fmt, text[:10], took)


FORMAT_SAMPLES = [
    "", "a", "user@example.com", "first.last@sub.example.org", ".a@b.c", "a.@b.c", "a..b@c.d",
    "a@b", "a@b.", "a@.b", "@b.c", "a@@b.c", "a@b@c.d", "example.com", "-bad.com", "a-b.c-d",
    "xn--bcher-kva.example", "a" * 64 + ".com", "127.0.0.1", "256.1.1.1", "1.2.3", "::1",
    "2001:db8::ff00:42:8329", "1::2::3", "fe80::1%eth0", "http://x.y/z?q#f", "urn:isbn:1",
    "no scheme", "/a/b~0~1", "/a~2", "0/a", "1#", "a/b", "{var}", "x{+y}z", "{", "%zz",
    "2020-02-29", "2019-02-29", "2020-13-01", "2020-01-01T12:00:00Z", "2020-01-01t12:00:00+0100",
    "2020-01-01T25:00:00Z", "12:00", "23:59:60.5Z", "24:00", "P1Y2M3DT4H5M6S", "P", "PT",
    "P1W", "PT1H", "P1YT", "123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456",
    "abc.de", "ab-.cd", "a.b.co",
]


@pytest.mark.parametrize("fmt", sorted(CodeGeneratorDraft2019.FORMAT_REGEXS))
def test_format_checks_agree_with_fastjsonschema_on_ascii_samples(fmt):
    ours = compile_schema({"type": "string", "format": fmt})
    upstream = re.compile(CodeGeneratorDraft2019.FORMAT_REGEXS[fmt])
    for text in FORMAT_SAMPLES:
        assert (check(ours, text) is None) == bool(upstream.match(text)), (fmt, text)


def test_regex_format_uses_re2_and_refuses_huge_strings():
    v = compile_schema({"type": "string", "format": "regex"})
    assert check(v, "^[a-z]+$") is None
    assert "must be regex" in check(v, "(unclosed")
    assert check(v, "x" * 5000) is not None


def test_draft04_ignores_formats_it_never_knew():
    v = compile_schema({"$schema": "http://json-schema.org/draft-04/schema#",
                        "type": "string", "format": "uuid"})
    assert check(v, "not-a-uuid") is None


COLLIDING = [k * (2**61 - 1) for k in range(1, 40_001)]  # all hash alike: ~1 MB of JSON


def test_unique_items_is_linear_even_with_colliding_hashes():
    v = compile_schema({"type": "array", "uniqueItems": True})
    for items in (COLLIDING, [{"a": n} for n in COLLIDING[:20_000]]):
        reason, took = timed(check, v, items)  # done, or cut by the deadline: never quadratic
        assert reason is None or "too costly" in reason
        assert took < FAST, took
        assert check(v, items, max_seconds=5) is None
    assert "must contain unique items" in check(v, COLLIDING + [COLLIDING[-1]], max_seconds=5)
    assert "must contain unique items" in check(v, [1, 2, 1.0])


@pytest.mark.parametrize("items, unique", [
    ([1, 1.0], False), ([1, True], True), ([0, False], True), ([{"a": 1, "b": 2},
     {"b": 2, "a": 1}], False), ([[1, 2], [2, 1]], True), (["1", 1], True),
    ([1.5, 1.50], False), ([{"a": [1]}, {"a": [1.0]}], False), ([None, "null"], True),
    ([1e300, 1e300], False), ([], True),
])
def test_unique_items_keeps_json_equality(items, unique):
    v = compile_schema({"type": "array", "uniqueItems": True})
    assert (check(v, items) is None) is unique
    stock = fastjsonschema.compile({"type": "array", "uniqueItems": True})
    try:
        stock(items)
        stock_unique = True
    except fastjsonschema.JsonSchemaValueException:
        stock_unique = False
    assert stock_unique is unique


def test_deeply_nested_params_give_a_reason_not_a_recursion_error():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    tree = {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}},
            "$ref": "#/$defs/t"}
    for schema in (tree, {"type": "array", "uniqueItems": True},
                   {"type": "array", "items": {"type": "array"}}):
        reason = check(compile_schema(schema), [deep, 1])
        assert reason is None or isinstance(reason, str)
    with shallow_recursion():
        assert "nested too deeply" in check(compile_schema(tree), deep)


def test_check_costly_beyond_the_deadline_is_refused_fast():
    branches = [{"type": "string", "minLength": 155 - i} for i in range(150)]  # last fits
    v = compile_schema({"type": "array", "items": {"anyOf": branches}})
    reason, took = timed(check, v, ["aaaaaa"] * 100_000)
    assert "too costly to validate" in reason
    assert took < 5 * MAX_CHECK_SECONDS  # cut at the budget, not after the whole list
    assert check(v, ["a" * 10] * 10) is None


def test_exponential_ref_recursion_is_cut_by_the_deadline():
    schema = {"$defs": {"n": {"anyOf": [
        {"type": "array", "items": {"$ref": "#/$defs/n"}, "contains": {"const": 0}},
        {"type": "array", "items": {"$ref": "#/$defs/n"}}]}}, "$ref": "#/$defs/n"}
    nested: list = []
    for _ in range(40):
        nested = [nested]
    reason, took = timed(check, compile_schema(schema), nested)
    assert "too costly" in reason and took < 5 * MAX_CHECK_SECONDS


def test_multiple_of_overflow_is_a_reason():
    v = compile_schema({"type": "number", "multipleOf": 1e-300})
    assert isinstance(check(v, 1e300), str)


def test_compile_cache_is_shared_across_threads():
    schema = {"type": "object", "properties": {"t": {"type": "string", "pattern": "^t$"}}}
    found = []
    threads = [threading.Thread(target=lambda: found.append(compile_schema(schema)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(v) for v in found}) == 1 and found[0] is compile_schema(schema)


def test_schema_text_is_canonical():
    assert schema_text({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert schema_text({"a": "é"}) == '{"a":"é"}'


def test_exported_names():
    assert set(schemas.__all__) == {
        "MAX_CHECK_SECONDS", "MAX_PATTERN_WORK", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH",
        "SchemaError", "Validator", "check", "compile_schema", "schema_of", "schema_text",
        "violation"}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10)


@given(_JSON)
@settings(max_examples=200, deadline=None)
def test_a_schema_that_takes_any_object_decides_as_the_generated_check_would(value):
    """``{}`` and ``{"type": "object"}`` (an SDK's ``**params``) are decided without running
    generated code; the verdicts are those of an equivalent schema that does run it."""
    assert check(compile_schema({}), value) is None
    by_type = check(compile_schema({"type": "object"}), value)
    generated = check(compile_schema({"type": "object", "properties": {}}), value)
    assert (by_type is None) == (generated is None)
