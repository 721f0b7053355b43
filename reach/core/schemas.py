# mypy: disable-error-code="no-untyped-call"
# (fastjsonschema's code generator, subclassed below, is not annotated)
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

Errors::

    ValueError
     └── SchemaError      the declared schema is refused (the channel answers invalid_params)

``check`` never raises for bad params: it returns a one-line reason instead, including when
the params are too deeply nested or too costly to validate against the schema.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any, NoReturn, cast
from urllib.parse import urlsplit

import fastjsonschema
import re2  # type: ignore[import-untyped]
from fastjsonschema.draft04 import CodeGeneratorDraft04
from fastjsonschema.draft06 import CodeGeneratorDraft06
from fastjsonschema.draft07 import CodeGeneratorDraft07
from fastjsonschema.draft2019 import CodeGeneratorDraft2019
from fastjsonschema.ref_resolver import RefResolver

__all__ = [
    "MAX_CHECK_SECONDS", "MAX_PATTERN_WORK", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH",
    "SchemaError", "Validator", "check", "compile_schema", "schema_of", "schema_text",
    "violation",
]

MAX_SCHEMA_BYTES = 8 * 1024  # of compact JSON text; compiling that much takes ~25 ms (see report)
MAX_SCHEMA_DEPTH = 32  # nested objects/arrays; pydantic models rarely pass 10
# CPU time (of this thread: time spent in other processes does not count, so a busy machine
# does not refuse params it would accept when quiet) one check may take before the params are
# refused. Legitimate params near the frame limit take a few ms (a 150k-item list: ~5 ms); the
# budget is there for schemas whose cost explodes (``$ref`` recursion under ``anyOf``).
MAX_CHECK_SECONDS = 0.02
_CLOCK_EVERY = 256  # steps between looks at the clock (thread_time is a system call)
# A pattern search costs at most ~(string length x RE2 program size) steps even when RE2's DFA
# gives up; refusing longer products keeps one search to a few ms.
MAX_PATTERN_WORK = 4_000_000
MAX_REGEX_FORMAT_CHARS = 4096  # longest string the "regex" format will try to compile


Clock = Callable[[], float]  # seconds; the checks' budget is counted on one


class SchemaError(ValueError):
    """A declared params schema is refused: not a valid JSON schema, or not a safe one."""


class _Overrun(Exception):
    """Raised inside a check that went past its budget; ``check`` turns it into a reason."""


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

    __slots__ = ("_func", "_run")

    def __init__(self, func: Callable[..., Any]) -> None:
        self._func = func
        # One per validator, reset per check: checks run one at a time, on the loop's thread,
        # and a check of small params (the common case) then costs no allocation and no clock.
        self._run = _Run(_FORMATS)

    def __call__(self, params: Any, *, max_seconds: float = MAX_CHECK_SECONDS,
                 clock: Clock = time.thread_time) -> None:
        """Raise ``fastjsonschema.JsonSchemaValueException`` if ``params`` do not fit."""
        run = self._run
        run.steps, run.deadline, run.budget, run.clock = _CLOCK_EVERY, None, max_seconds, clock
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
          clock: Clock = time.thread_time) -> str | None:
    """None when ``params`` are valid, else a one-line reason (never raises for bad params).

    ``max_seconds`` of ``clock`` (this thread's CPU time; a test passes a fake one) is the
    check's budget."""
    try:
        validator(params, max_seconds=max_seconds, clock=clock)
    except fastjsonschema.JsonSchemaValueException as exc:
        return str(exc.message)
    except RecursionError:
        return "params are nested too deeply to validate"
    except _Overrun as exc:
        return str(exc)
    except ArithmeticError as exc:  # e.g. multipleOf on a huge number
        return f"params cannot be validated: {exc}"
    return None


def violation(validator: Validator, value: Any, *, max_seconds: float = MAX_CHECK_SECONDS,
              clock: Clock = time.thread_time) -> tuple[str, str] | None:
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
    except _Overrun as exc:
        return "$", str(exc)
    except ArithmeticError as exc:
        return "$", f"cannot be validated: {exc}"
    return None


# --- compiling ------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _compile(text: str, max_depth: int) -> Validator:
    schema = json.loads(text)
    _audit(schema, max_depth)
    try:
        cls = _generator_for(schema)
        resolver = RefResolver.from_schema(schema, handlers=_NO_REMOTE, store={})
        generator = cls(schema, resolver=resolver, formats=_formats_for(cls))
        code, namespace = generator.func_code, generator.global_state
        exec(code, namespace)  # what fastjsonschema.compile does, with our generator
    except SchemaError:
        raise
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise SchemaError(f"invalid params schema: {exc}") from exc
    except Exception as exc:  # the generator trips on malformed input in many ways
        raise SchemaError(f"invalid params schema: {type(exc).__name__}: {exc}") from exc
    leftover = [k for k, v in namespace["REGEX_PATTERNS"].items() if not isinstance(v, _Pattern)]
    if leftover:  # fail closed if fastjsonschema compiled a regex we did not route to RE2
        raise SchemaError(f"params schema uses unsupported regexes: {leftover!r}")
    return Validator(namespace[resolver.get_scope_name()])


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


# --- regexes --------------------------------------------------------------------------------


def _re2_options(max_mem: int = 8 << 20) -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True  # a yes/no answer needs no groups, and groups cost NFA time
    options.max_mem = max_mem
    return options


_RE2_OPTIONS = _re2_options()


def _translate(pattern: str) -> str:
    r"""ECMA-262/Python spellings RE2 lacks: ``\uXXXX`` as ``\x{XXXX}``, ``\Z`` as ``\z``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = pattern[i + 1]
        hexdigits = pattern[i + 2:i + 6]
        if nxt == "u" and len(hexdigits) == 4 and all(h in _HEX for h in hexdigits):
            out.append("\\x{" + hexdigits + "}")
            i += 6
        else:
            out.append("\\z" if nxt == "Z" else "\\" + nxt)
            i += 2
    return "".join(out)


_HEX = frozenset("0123456789abcdefABCDEF")


class _Pattern:
    """An RE2 regex with the ``search`` the generated code calls, refusing strings so long
    that even RE2's linear worst case (when its DFA gives up) would stall the loop."""

    __slots__ = ("pattern", "regex", "max_chars")

    def __init__(self, pattern: str) -> None:
        if not isinstance(pattern, str):
            raise SchemaError(f"pattern must be a string, not {pattern!r}")
        try:
            self.regex = re2.compile(_translate(pattern), _RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
            raise SchemaError(
                f"pattern {pattern!r} is not supported: {reason}; patterns use RE2 syntax "
                f"(linear time: no backreferences or look-arounds)") from None
        self.pattern = pattern
        self.max_chars = MAX_PATTERN_WORK // max(1, self.regex.programsize)

    def search(self, text: str) -> bool:
        if len(text) > self.max_chars:
            raise _Overrun(f"a {len(text)}-character string is too long to check against "
                           f"pattern {self.pattern!r} (at most {self.max_chars})")
        return self.regex.search(text) is not None


# --- formats --------------------------------------------------------------------------------
# fastjsonschema checks formats with Python ``re``; "email" and "idn-email" are quadratic and
# "json-pointer" super-linear on hostile strings, and "regex" compiles the data with Python
# ``re``. Every format it knows is replaced here by an RE2 match or a plain linear check.


def _from_fastjsonschema(regex: str) -> Callable[[str], bool]:
    assert regex.startswith("^") and regex.endswith("\\Z"), regex
    body = regex[1:-2].replace("{,", "{0,")  # RE2 reads "{,n}" as literal text
    compiled = re2.compile(body, _RE2_OPTIONS)
    return lambda value: compiled.fullmatch(value) is not None


def _email(value: str) -> bool:
    local, at, domain = value.partition("@")
    return (bool(at) and bool(local) and "@" not in domain and local[0] != "."
            and local[-1] != "." and ".." not in local and "." in domain[1:-1])


def _idn_email(value: str) -> bool:
    local, at, domain = value.partition("@")
    return bool(at) and bool(local) and "@" not in domain and "." in domain[1:-1]


_IDN_HOSTNAME = re2.compile(
    r"(?:xn--)?[a-zA-Z0-9][a-zA-Z0-9_-]{0,61}[a-zA-Z0-9]?\."
    r"(?:xn--(?:[a-zA-Z0-9-]{1,50}|[a-zA-Z0-9-]{1,30}\.[a-zA-Z]{2,})"
    r"|[a-zA-Z0-9][a-zA-Z0-9-]{0,49}|[a-zA-Z0-9][a-zA-Z0-9-]{0,29}\.[a-zA-Z]{2,})",
    _RE2_OPTIONS)
_DURATION = re2.compile(
    r"P(?:[0-9]+W|(?:[0-9]+Y)?(?:[0-9]+M)?(?:[0-9]+D)?"
    r"(?:T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?)", _RE2_OPTIONS)
_REGEX_FORMAT_OPTIONS = _re2_options(max_mem=256 << 10)


def _regex(value: str) -> bool:
    if len(value) > MAX_REGEX_FORMAT_CHARS:
        return False
    try:
        re2.compile(_translate(value), _REGEX_FORMAT_OPTIONS)
    except re2.error:
        return False
    return True


_HANDWRITTEN: dict[str, Callable[[str], bool]] = {
    "email": _email,
    "idn-email": _idn_email,
    "idn-hostname": lambda v: _IDN_HOSTNAME.fullmatch(v) is not None,
    "duration": lambda v: v != "P" and _DURATION.fullmatch(v) is not None,
    "regex": _regex,
}
_FORMATS: dict[str, Callable[[str], bool]] = {
    **{name: _from_fastjsonschema(rx) for name, rx in CodeGeneratorDraft2019.FORMAT_REGEXS.items()
       if name not in _HANDWRITTEN},
    **_HANDWRITTEN,
}


def _formats_for(cls: type[CodeGeneratorDraft04]) -> dict[str, Callable[[str], bool]]:
    """Only the formats this draft checks, so a draft-04 schema ignores "uuid" as before."""
    return {k: v for k, v in _FORMATS.items() if k in cls.FORMAT_REGEXS or k == "regex"}


class _Run(dict[str, Callable[[str], bool]]):
    """Per-check state, riding in the ``custom_formats`` argument that every generated function
    takes and passes down to the ones it calls: the formats, and the CPU-time budget."""

    __slots__ = ("budget", "clock", "deadline", "steps")

    def __init__(self, formats: dict[str, Callable[[str], bool]]) -> None:
        super().__init__(formats)
        self.budget = MAX_CHECK_SECONDS
        self.clock: Clock = time.thread_time
        self.deadline: float | None = None  # set at the first look at the clock
        self.steps = _CLOCK_EVERY

    def spend(self, steps: int = 1) -> None:
        self.steps -= steps
        if self.steps > 0:
            return
        self.steps = _CLOCK_EVERY
        now = self.clock()
        if self.deadline is None:  # the first _CLOCK_EVERY steps are not timed: a few µs
            self.deadline = now + self.budget
        elif now > self.deadline:
            raise _Overrun("params are too costly to validate against this schema; "
                           "send smaller params")


# --- uniqueItems ----------------------------------------------------------------------------


def _unique_items(items: list[Any], run: _Run) -> bool:
    """Whether no two items are equal as JSON values (1 == 1.0, true != 1), in linear time.

    fastjsonschema puts the items in a set as they are; ints that collide on purpose
    (k * (2**61 - 1) all hash alike) make that quadratic. Keys here are text, hashed with the
    interpreter's randomised string hash; strings get their own set so "1" stays apart from 1.
    """
    texts: set[str] = set()
    others: set[str] = set()
    for index, item in enumerate(items):
        if not index % 4096:
            run.spend(4096)
        if isinstance(item, str):
            seen, key = texts, item
        else:
            seen, key = others, _json_key(item)
        if key in seen:
            return False
        seen.add(key)
    return True


def _json_key(item: Any) -> str:
    if item is True or item is False or item is None:
        return "true" if item is True else "false" if item is False else "null"
    if isinstance(item, int):
        return str(item)
    if isinstance(item, float):
        return str(int(item)) if item.is_integer() else repr(item)
    key = json.dumps(item, sort_keys=True, separators=(",", ":"))
    if "." in key or "e" in key or "E" in key:  # maybe a float inside: 1.0 must equal 1
        key = json.dumps(json.loads(key, parse_float=_integral), sort_keys=True,
                         separators=(",", ":"))
    return "J" + key  # apart from the scalar keys above


def _integral(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() else value


# --- code generation ------------------------------------------------------------------------
# fastjsonschema has no hook for how it compiles patterns or checks uniqueItems, so these
# generators override the few methods that emit them (same generated lines, RE2 objects
# behind REGEX_PATTERNS) and count a step of the budget at the start of every subschema.


class _Bounded(CodeGeneratorDraft04):
    @property
    def _node(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self._definition)

    @property
    def global_state(self) -> dict[str, Any]:
        state: dict[str, Any] = super().global_state
        state["UNIQUE_ITEMS"] = _unique_items
        return state

    def generate_func_code_block(self, definition: Any, variable: str, variable_name: str,
                                 clear_variables: bool = False) -> int:
        # optimize=False: fastjsonschema merges a line equal to the previous one.
        self.l("custom_formats.spend()", optimize=False)
        count: int = super().generate_func_code_block(definition, variable, variable_name,
                                                      clear_variables)
        return count

    def exc(self, msg: str, *args: Any, append_to_msg: str | None = None,
            rule: str | None = None) -> None:
        # Upstream writes the value, path and whole subschema (every $ref target inlined, and
        # refs inside const/enum data resolved) into each raise: generated code that grows with
        # refs x target size, and most of the compile time. `check` only needs the message.
        arg = '"' + msg + '"'
        if append_to_msg:
            arg += " + (" + append_to_msg + ")"
        node = self._definition
        rule_value = node.get(rule) if isinstance(node, dict) and rule else None
        # name: where in the value it failed ("data.items[1].q"), for ``violation``'s path.
        self.l("raise JsonSchemaValueException(" + arg + ', name="{name}")', *args,
               definition_rule=self.e(rule_value))

    def generate_pattern(self) -> None:
        pattern = self._node["pattern"]
        self._compile_regexps[pattern] = _Pattern(pattern)
        with self.l("if isinstance({variable}, str):"):
            with self.l("if not REGEX_PATTERNS[{}].search({variable}):", repr(pattern)):
                self.exc("{name} must match pattern {}", self.e(pattern), rule="pattern")

    def generate_pattern_properties(self) -> None:
        patterns = self._node["patternProperties"]
        if not isinstance(patterns, dict):
            raise SchemaError("patternProperties must be an object")
        for pattern in patterns:
            self._compile_regexps[pattern] = _Pattern(pattern)
        self.create_variable_is_dict()
        with self.l("if {variable}_is_dict:"):
            self.create_variable_keys()
            if not patterns:
                return
            with self.l("for {variable}_key, {variable}_val in {variable}.items():"):
                self.l("custom_formats.spend()", optimize=False)
                for pattern, definition in patterns.items():
                    with self.l("if REGEX_PATTERNS[{}].search({variable}_key):", repr(pattern)):
                        with self.l("if {variable}_key in {variable}_keys:"):
                            self.l("{variable}_keys.remove({variable}_key)")
                        self.generate_func_code_block(
                            definition, f"{self._variable}_val",
                            f"{self._variable_name}.{{{self._variable}_key}}",
                            clear_variables=True)

    def generate_required(self) -> None:
        # Upstream tests required names against patternProperties with Python `re` here (at
        # compile time) when additionalProperties is false; do that test with RE2 instead and
        # hide additionalProperties from it.
        definition = self._node
        required, patterns = definition.get("required"), definition.get("patternProperties")
        if (not definition.get("additionalProperties", True) and isinstance(required, list)
                and isinstance(patterns, dict) and patterns):
            known = definition.get("properties", {})
            compiled = [_Pattern(p) for p in patterns]
            impossible = [name for name in required if isinstance(name, str)
                          and name not in known and not any(p.search(name) for p in compiled)]
            if impossible:
                raise SchemaError(f"properties {impossible} are required but not allowed")
            self._definition = {k: v for k, v in definition.items()
                                if k != "additionalProperties"}
        try:
            super().generate_required()
        finally:
            self._definition = definition

    def generate_unique_items(self) -> None:
        if not self._node["uniqueItems"]:
            return
        self.create_variable_is_list()
        with self.l("if {variable}_is_list:"):
            with self.l("if not UNIQUE_ITEMS({variable}, custom_formats):"):
                self.exc("{name} must contain unique items", rule="uniqueItems")


class _Draft04(_Bounded):
    pass


class _Draft06(_Bounded, CodeGeneratorDraft06):
    pass


class _Draft07(_Bounded, CodeGeneratorDraft07):
    pass


class _Draft2019(_Bounded, CodeGeneratorDraft2019):
    pass


def _generator_for(schema: Any) -> type[_Bounded]:
    """The draft fastjsonschema would pick for ``schema`` (by ``$schema``; 2019-09 default)."""
    version = schema.get("$schema", "") if isinstance(schema, dict) else ""
    if not isinstance(version, str):
        version = ""
    if "draft-04" in version:
        return _Draft04
    if "draft-06" in version:
        return _Draft06
    if "draft-07" in version:
        return _Draft07
    return _Draft2019
