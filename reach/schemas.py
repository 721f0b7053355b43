"""JSON-schema params: compile once, validate fast, explain failures in one line.

``fastjsonschema`` compiles a schema to a Python function (a few µs per check), so validating
params on every call costs little. Compiled validators are shared by schema text, so a hundred
agents declaring the same capability compile it once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import fastjsonschema

Validator = Callable[[Any], Any]


class SchemaError(ValueError):
    """A declared params schema is not a valid JSON schema."""


def schema_of(params: Any) -> dict[str, Any]:
    """Accept a JSON-schema dict, a pydantic model class, or None (anything goes)."""
    if params is None:
        return {"type": "object"}
    if isinstance(params, dict):
        return params
    dump = getattr(params, "model_json_schema", None)
    if callable(dump):
        return dict(dump())
    raise TypeError(f"params must be a JSON schema dict or a pydantic model, not {params!r}")


def compile_schema(schema: dict[str, Any]) -> Validator:
    """A validator for ``schema``; raises ``SchemaError`` if the schema itself is broken."""
    return _compile(json.dumps(schema, sort_keys=True))


@lru_cache(maxsize=4096)
def _compile(text: str) -> Validator:
    try:
        return fastjsonschema.compile(json.loads(text))
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise SchemaError(f"invalid params schema: {exc}") from exc


def check(validator: Validator, params: Any) -> str | None:
    """None when ``params`` are valid, else a one-line reason."""
    try:
        validator(params)
    except fastjsonschema.JsonSchemaValueException as exc:
        return str(exc.message)
    return None
