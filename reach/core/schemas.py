"""JSON-schema params: compile once, validate in bounded time, explain failures in one line.

``fastjsonschema`` compiles a schema to a Python function, so validating params on every call
costs little. Compiled validators are shared by schema text, so a hundred agents declaring the
same capability compile it once (the cache is thread-safe: callers may precompile off-loop).

Schemas come from the wire and both compiling and checking run on the coordinator's loop, so
nothing a schema says may make either unbounded:

* no schema makes the coordinator open a URL or a file: only local ``#...`` ``$ref`` are
  accepted, ``$id``/``id`` may not name a remote base, and the resolver is handed a mapping
  that refuses every URI scheme in case anything slips past the walk;
* a schema is at most ``max_bytes`` of JSON text and ``max_depth`` levels deep;
* ``pattern`` and ``patternProperties`` run on RE2 (linear time), never on Python ``re``;
  a pattern RE2 cannot compile (backreferences, look-arounds) is refused at registration;
* ``format`` checks are RE2 or hand-written linear checks, ``uniqueItems`` hashes canonical
  JSON text (no engineered hash collisions), and every check runs within a CPU-time budget.

The parts: reach.core.schema_bounds (the limits, the errors, one check's CPU budget),
reach.core.schema_regex (RE2 patterns and formats), reach.core.schema_codegen (the bounded
code generators); this module is the public surface and the compile step with its audit.

Errors::

    ValueError
     └── SchemaError      the declared schema is refused (the channel answers invalid_params)

``check`` never raises for bad params: it returns a one-line reason instead, including when
the params are too deeply nested or too costly to validate against the schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any, NoReturn
from urllib.parse import urlsplit

import fastjsonschema
from fastjsonschema.ref_resolver import RefResolver

from reach.core.schema_bounds import (
    CLOCK_EVERY,
    CPU_CLOCK,
    MAX_CHECK_SECONDS,
    MAX_PATTERN_WORK,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    Clock,
    Overrun,
    Run,
    SchemaError,
)
from reach.core.schema_codegen import generator_for
from reach.core.schema_regex import FORMATS, Pattern, formats_for

__all__ = [
    "MAX_CHECK_SECONDS", "MAX_PATTERN_WORK", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH",
    "SchemaError", "Validator", "check", "compile_schema", "schema_of", "schema_text",
    "violation",
]


# --- public surface -------------------------------------------------------------------------


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


def schema_text(schema: Any) -> str:
    """The canonical JSON text of ``schema``: the cache key, and what ``max_bytes`` measures."""
    try:
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except RecursionError:
        raise SchemaError("params schema is nested too deeply to encode as JSON") from None
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"params schema is not plain JSON: {exc}") from exc


class Validator:
    """A compiled params schema; hashable by identity, shared through the compile cache."""

    __slots__ = ("_func", "_run", "any_object")

    def __init__(self, func: Callable[..., Any], any_object: bool) -> None:
        self._func = func
        # The schema takes every JSON object (``{}``, ``{"type": "object"}``: what an SDK
        # declares for ``**params``), so a dict needs no run of the generated code.
        self.any_object = any_object
        # One per validator, reset per check: checks run one at a time, on the loop's thread,
        # and a check of small params (the common case) then costs no allocation and no clock.
        self._run = Run(FORMATS)

    def __call__(self, params: Any, *, max_seconds: float = MAX_CHECK_SECONDS,
                 clock: Clock = CPU_CLOCK) -> None:
        """Raise ``fastjsonschema.JsonSchemaValueException`` if ``params`` do not fit."""
        run = self._run
        run.steps, run.deadline, run.budget, run.clock = CLOCK_EVERY, None, max_seconds, clock
        self._func(params, run)


def compile_schema(schema: dict[str, Any], *, max_bytes: int = MAX_SCHEMA_BYTES,
                   max_depth: int = MAX_SCHEMA_DEPTH) -> Validator:
    """A validator for ``schema``; raises ``SchemaError`` if the schema is broken or unsafe."""
    text = schema_text(schema)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise SchemaError(
            f"params schema is {size} bytes of JSON, over the limit of {max_bytes}; "
            f"split the capability or move shared parts into '$defs'")
    return _compile(text, max_depth)


def check(validator: Validator, params: Any, *, max_seconds: float = MAX_CHECK_SECONDS,
          clock: Clock = CPU_CLOCK) -> str | None:
    """None when ``params`` are valid, else a one-line reason (never raises for bad params).

    ``max_seconds`` of ``clock`` (this thread's CPU time; a test passes a fake one) is the
    check's budget."""
    if validator.any_object and type(params) is dict:
        return None
    try:
        validator(params, max_seconds=max_seconds, clock=clock)
    except fastjsonschema.JsonSchemaValueException as exc:
        return str(exc.message)
    except RecursionError:
        return "params are nested too deeply to validate"
    except Overrun as exc:
        return str(exc)
    except ArithmeticError as exc:  # e.g. multipleOf on a huge number
        return f"params cannot be validated: {exc}"
    return None


def violation(validator: Validator, value: Any, *, max_seconds: float = MAX_CHECK_SECONDS,
              clock: Clock = CPU_CLOCK) -> tuple[str, str] | None:
    """None when ``value`` fits, else where and why it does not: (a JSON path such as
    ``$.items[1].q``, a one-line reason). For results (``returns``); never raises for a bad
    value. The compiled validator stops at the first violation, so there is one."""
    try:
        validator(value, max_seconds=max_seconds, clock=clock)
    except fastjsonschema.JsonSchemaValueException as exc:
        name = exc.name or "data"
        return "$" + name[4:] if name.startswith("data") else name, str(exc.message)
    except RecursionError:
        return "$", "nested too deeply to validate"
    except Overrun as exc:
        return "$", str(exc)
    except ArithmeticError as exc:
        return "$", f"cannot be validated: {exc}"
    return None


# --- compiling ------------------------------------------------------------------------------


_ANY_OBJECT = frozenset({"{}", '{"type":"object"}'})  # (as ``schema_text`` writes them)


@lru_cache(maxsize=4096)
def _compile(text: str, max_depth: int) -> Validator:
    schema = json.loads(text)
    _audit(schema, max_depth)
    try:
        cls = generator_for(schema)
        resolver = RefResolver.from_schema(schema, handlers=_NO_REMOTE, store={})
        generator = cls(schema, resolver=resolver, formats=formats_for(cls))
        code, namespace = generator.func_code, generator.global_state
        exec(code, namespace)  # what fastjsonschema.compile does, with our generator
    except SchemaError:
        raise
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise SchemaError(f"invalid params schema: {exc}") from exc
    except Exception as exc:  # the generator trips on malformed input in many ways
        raise SchemaError(f"invalid params schema: {type(exc).__name__}: {exc}") from exc
    leftover = [k for k, v in namespace["REGEX_PATTERNS"].items() if not isinstance(v, Pattern)]
    if leftover:  # fail closed if fastjsonschema compiled a regex we did not route to RE2
        raise SchemaError(f"params schema uses unsupported regexes: {leftover!r}")
    return Validator(namespace[resolver.get_scope_name()], text in _ANY_OBJECT)


def _audit(schema: Any, max_depth: int) -> None:
    """Refuse what fastjsonschema would fetch, and schemas nested deeper than ``max_depth``.

    ``$ref`` is checked in every object, as fastjsonschema's resolver rewrites every string
    ``$ref`` it meets; ``$id``/``id`` only where they are keywords, as ``id`` is a common
    property name (a key under ``properties`` names a property, it is not a keyword).
    """
    stack: list[tuple[Any, int, bool]] = [(schema, 1, True)]
    while stack:
        node, depth, is_schema = stack.pop()
        if depth > max_depth and isinstance(node, (dict, list)):
            raise SchemaError(
                f"params schema is nested deeper than {max_depth} levels; flatten it, or "
                f"move repeated parts into '$defs' and use '$ref'")
        if isinstance(node, list):
            stack.extend((item, depth + 1, is_schema) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            raise SchemaError(f"only local '#/...' $ref are allowed; got {ref!r}")
        if is_schema:
            for key in ("$id", "id"):
                base = node.get(key)
                if isinstance(base, str) and (urlsplit(base).scheme or urlsplit(base).netloc):
                    raise SchemaError(f"{key} may not name a remote base URI; got {base!r}")
        for key, value in node.items():
            if is_schema and key in _SCHEMA_MAPS and isinstance(value, dict):
                stack.extend((sub, depth + 2, True) for sub in value.values())
            else:
                stack.append((value, depth + 1, is_schema and key in _SCHEMA_VALUED))


# Keywords whose value is a schema (or a list of schemas), and those mapping names to schemas.
_SCHEMA_VALUED = frozenset({
    "items", "additionalItems", "additionalProperties", "not", "if", "then", "else",
    "contains", "propertyNames", "allOf", "anyOf", "oneOf",
})
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "definitions", "$defs",
                          "dependencies"})


class _RefuseEveryScheme(Mapping[str, Callable[[str], Any]]):
    """Claims a handler for every URI scheme, each refusing: fastjsonschema's resolver sends
    any scheme *not* in its handlers to ``urlopen`` (no timeout, on the loop)."""

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote

    def __contains__(self, scheme: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _refuse_remote(uri: str) -> NoReturn:
    raise SchemaError(f"only local '#/...' $ref are allowed; got {uri!r}")


_NO_REMOTE = _RefuseEveryScheme()
