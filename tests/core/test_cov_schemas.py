"""Params schemas at their edges: arithmetic that cannot be done, a regex that did not go
through RE2 (fail closed), remote-looking ids inside data rather than schemas, empty
``patternProperties``, ``uniqueItems: false``, and the draft a ``$schema`` picks."""

from __future__ import annotations

import pytest

from reach.core import schema_codegen, schemas
from reach.core.schemas import SchemaError, check, compile_schema


def obj(**props: object) -> dict[str, object]:
    return {"type": "object", "properties": props}


def test_a_number_too_large_for_the_arithmetic_is_a_reason_not_a_crash() -> None:
    v = compile_schema(obj(n={"multipleOf": 0.5}))
    reason = check(v, {"n": 10**400})  # an int past any float: n / 0.5 overflows
    assert reason is not None and reason.startswith("params cannot be validated:")
    assert check(v, {"n": 3}) is None and check(v, {"n": 2.5}) is None


def test_a_regex_compiled_outside_re2_makes_the_schema_fail_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As if a fastjsonschema version compiled a pattern itself (Python's re: backtracking).
    monkeypatch.delattr(schema_codegen.Bounded, "generate_pattern")
    with pytest.raises(SchemaError, match="unsupported regexes"):
        compile_schema(obj(code={"type": "string", "pattern": "^cov-[a-z]+$"}))


def test_ids_inside_data_are_not_schema_ids() -> None:
    # A dict in ``enum`` or ``const`` is a value, not a schema: its "$id" names nothing.
    v = compile_schema(obj(site={"enum": [{"$id": "https://example.com/x"}, "local"]},
                           fixed={"const": {"id": "http://example.com/y"}}))
    assert check(v, {"site": {"$id": "https://example.com/x"}}) is None
    assert check(v, {"site": "elsewhere"}) is not None
    with pytest.raises(SchemaError, match="remote base URI"):
        compile_schema(obj(site={"$id": "https://example.com/x", "type": "string"}))


def test_empty_pattern_properties_and_unique_items_false_accept_anything() -> None:
    v = compile_schema({"type": "object", "patternProperties": {},
                        "properties": {"tags": {"type": "array", "uniqueItems": False}}})
    assert check(v, {"any": 1, "tags": [1, 1, 1]}) is None
    assert check(v, {"tags": "no"}) is not None


@pytest.mark.parametrize(("version", "conditional"), [
    ("http://json-schema.org/draft-04/schema#", False),
    ("http://json-schema.org/draft-06/schema#", False),
    ("http://json-schema.org/draft-07/schema#", True),
    (7, True),  # not a string: the default draft (2019-09)
    ("https://json-schema.org/draft/2019-09/schema", True),
])
def test_the_schema_draft_follows_its_dollar_schema(version: object,
                                                    conditional: bool) -> None:
    # if/then arrived in draft-07: earlier drafts ignore it.
    schema = {"$schema": version, "type": "object",
              "if": {"properties": {"kind": {"const": "box"}}},
              "then": {"required": ["size"]}}
    v = compile_schema(schema)
    reason = check(v, {"kind": "box"})
    assert (reason is not None) is conditional
    assert check(v, {"kind": "box", "size": 1}) is None


def test_the_scheme_handlers_claim_every_scheme_and_list_none() -> None:
    handlers = schemas._RefuseEveryScheme()
    assert "http" in handlers and "file" in handlers
    assert list(handlers) == [] and len(handlers) == 0
    with pytest.raises(SchemaError):
        handlers["https"]("https://example.com/schema.json")
