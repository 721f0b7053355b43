"""JSON-schema params (reach/schemas.py): schema_of, compile_schema, check."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from reach.schemas import SchemaError, check, compile_schema, schema_of

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
