"""reach.core.results: a capability's declared ``returns`` schema, compiled and checked."""

from __future__ import annotations

import pytest
from depth import shallow_recursion

from reach.core.results import BAD_RESULT, bad_result, compile_returns
from reach.core.schemas import SchemaError, violation

SCHEMA = {"type": "object", "required": ["quote"],
          "properties": {"quote": {"type": "object", "required": ["total"],
                                   "properties": {"total": {"type": "number"}}},
                         "lines": {"type": "array", "items": {"type": "integer"}}}}


def test_nothing_declared_compiles_nothing_and_checks_nothing() -> None:
    assert compile_returns(None, max_bytes=8192) is None
    assert bad_result(None, {"anything": 1}, capability="c", agent="a", version="1") is None


def test_a_result_that_fits_is_no_error() -> None:
    v = compile_returns(SCHEMA, max_bytes=8192)
    assert bad_result(v, {"quote": {"total": 1}}, capability="c", agent="a", version="1") is None


def test_a_broken_result_is_a_fault_with_its_path_agent_and_version() -> None:
    v = compile_returns(SCHEMA, max_bytes=8192)
    error = bad_result(v, {"quote": {"total": 1}, "lines": [1, "x"]}, capability="p.quote",
                       agent="pricing", version="2.0")
    assert error == {
        "code": BAD_RESULT,
        "message": "agent 'pricing' (version 2.0) answered 'p.quote' with a result that "
                   "breaks its returns schema at $.lines[1]: result.lines[1] must be integer",
        "details": {"answer": False, "agent": "pricing", "version": "2.0",
                    "capability": "p.quote",
                    "errors": [{"path": "$.lines[1]",
                                "message": "result.lines[1] must be integer"}]}}
    assert BAD_RESULT == "bad_result"


def test_the_whole_result_of_the_wrong_type_is_at_the_root() -> None:
    v = compile_returns(SCHEMA, max_bytes=8192)
    error = bad_result(v, [1, 2], capability="c", agent="a", version="1")
    assert error is not None
    assert error["details"]["errors"] == [{"path": "$", "message": "result must be object"}]


def test_a_reason_that_does_not_name_the_data_is_kept_as_it_is() -> None:
    v = compile_returns({"items": {"$ref": "#"}}, max_bytes=8192)
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    with shallow_recursion():
        error = bad_result(v, nested, capability="c", agent="a", version="1")
    assert error is not None
    assert error["details"]["errors"] == [{"path": "$",
                                           "message": "nested too deeply to validate"}]


def test_a_check_past_its_budget_is_a_violation_at_the_root() -> None:
    v = compile_returns({"type": "array", "items": {"type": "integer"}}, max_bytes=8192)
    assert v is not None
    found = violation(v, list(range(100_000)), max_seconds=0.0)
    assert found is not None and found[0] == "$" and "too costly" in found[1]


def test_a_refused_returns_schema_says_returns() -> None:
    with pytest.raises(SchemaError, match="^returns schema is .* bytes"):
        compile_returns({"enum": ["x" * 100]}, max_bytes=50)
    with pytest.raises(SchemaError, match="only local"):
        compile_returns({"$ref": "http://example.com/s.json"}, max_bytes=8192)


def test_violation_reports_deep_paths_and_fits() -> None:
    v = compile_returns(SCHEMA, max_bytes=8192)
    assert v is not None
    assert violation(v, {"quote": {"total": 2}}) is None
    assert violation(v, {"quote": {"amount": 2}}) == (
        "$.quote", "data.quote must contain ['total'] properties")
    assert violation(v, {"quote": {"total": "2"}}) == ("$.quote.total",
                                                      "data.quote.total must be number")


def test_violation_of_a_value_nested_too_deeply_or_unmeasurable() -> None:
    deep = compile_returns({"items": {"$ref": "#"}}, max_bytes=8192)
    assert deep is not None
    nested: list[object] = []
    for _ in range(5000):
        nested = [nested]
    with shallow_recursion():
        assert violation(deep, nested) == ("$", "nested too deeply to validate")
    huge = compile_returns({"multipleOf": 0.1}, max_bytes=8192)
    assert huge is not None
    found = violation(huge, 10 ** 400)
    assert found is not None and found[0] == "$" and found[1].startswith("cannot be validated")
