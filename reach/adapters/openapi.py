"""Capabilities from an OpenAPI 3 document: one per operation that has an ``operationId``.

Pure: ``capabilities(doc, overrides)`` takes the parsed document (``HttpAgent.open`` fetched
it from the service's own origin) and returns the capability table an ``HttpAgent`` declares,
plus a note for every operation it left out and why.

- **name**: the ``operationId`` as written; the registry normalizes it like any name
  (``lookupOrder`` is routed as ``order.lookup``; the caller may use either spelling).
- **method, path**: the operation's; paths are relative to the agent's ``url`` (the
  document's ``servers`` are ignored: the operator's ``url`` says where the service is).
- **params**: for GET, HEAD and DELETE (whose params go in the query string) an object whose
  properties are the query and path parameters; for the other methods the JSON request
  body's schema, with the path parameters added (``allOf``) when there are any, and the
  query parameters listed under the capability's ``query`` key so they are sent as such.
- **idempotent**: true for the methods HTTP defines as idempotent (GET, HEAD, PUT, DELETE,
  OPTIONS), false otherwise; ``description`` from the summary.
- ``overrides`` (the agent's ``capabilities`` table): an entry named like an operation
  replaces the fields it names (``latency_ms``, ``idempotent``…); any other entry is one more
  capability, declared as in a table without OpenAPI.

**References.** Only local ``#/components/...`` references are followed. Schema references
are kept as references: each component a params schema uses (transitively) is copied under
the schema's own ``$defs`` and the reference rewritten to point there, so recursive schemas
stay finite. A reference to anything else — another file, a URL, ``#/paths/...`` inside a
schema — refuses the whole document (``ValueError``): the coordinator never opens a URL or a
file a schema names (docs/security.md).

**Bounds** (issue 25, item 7: one 1.5 MB component used by 200 operations was copied per
operation — 4.9 s of a frozen loop and 1.25 GB — before the 8 KiB schema check, and a
50,000-deep document crashed ``reach serve --agents``). ``read`` parses the bytes (the caller
bounds them, and runs it off the event loop) and refuses a document nested deeper than
``MAX_DOC_DEPTH`` before anything else walks it. Each operation's params schema is then built
against a budget of ``max_schema_bytes``: every value copied counts at least the bytes it
would take as compact JSON, so the expansion stops — and the document is refused, naming the
operation — as soon as one schema is certain to be over the limit its capability would be
refused for anyway. No operation can cost more than that budget, whatever the references.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from reach.core.schemas import MAX_SCHEMA_BYTES

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
MAX_OPERATIONS = 1000   # a table larger than this is not one agent
MAX_HOPS = 32           # a chain of references (parameter → parameter → …) longer than this
MAX_DOC_DEPTH = 64      # nesting of the whole document (a params schema may nest 32 levels)
_SCHEMAS = "#/components/schemas/"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

Table = dict[str, dict[str, Any]]


class Refused(ValueError):
    """The document cannot be used; the message is one line saying why."""


class Unreadable(Refused):
    """The bytes are not a JSON document at all."""


def read(body: bytes, overrides: Mapping[str, Mapping[str, Any]] | None = None,
         max_schema_bytes: int = MAX_SCHEMA_BYTES) -> tuple[Table, list[str]]:
    """``capabilities`` of a document given as the bytes the service sent (CPU-bound: call
    it in a thread). Raises ``ValueError`` (one line) for bytes that are not a usable
    document: not JSON, nested deeper than ``MAX_DOC_DEPTH``, or one over the bounds below."""
    try:
        doc = json.loads(body)
    except RecursionError:
        raise Refused(f"it nests deeper than {MAX_DOC_DEPTH} levels") from None
    except ValueError as exc:  # (UnicodeDecodeError is one)
        raise Unreadable(f"it is not JSON: {exc}") from None
    depth = _depth(doc, MAX_DOC_DEPTH)
    if depth > MAX_DOC_DEPTH:
        raise Refused(f"it nests deeper than {MAX_DOC_DEPTH} levels")
    return capabilities(doc, overrides, max_schema_bytes)


def _depth(doc: Any, limit: int) -> int:
    """How deep ``doc`` nests (objects and arrays), counted without recursion; stops at
    ``limit`` + 1."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return deepest


def capabilities(doc: Any, overrides: Mapping[str, Mapping[str, Any]] | None = None,
                 max_schema_bytes: int = MAX_SCHEMA_BYTES) -> tuple[Table, list[str]]:
    """The capability table of ``doc`` merged with ``overrides``, and the operations skipped
    (each a line saying why). Raises ``ValueError`` for a document it cannot use, among
    them one whose params schema for an operation would be over ``max_schema_bytes``
    (counted while it is built, so building it stops there). ``doc`` must nest at most
    ``MAX_DOC_DEPTH`` levels (``read`` checks)."""
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3."):
        raise ValueError("not an OpenAPI 3 document: it has no 'openapi: 3.x' field")
    paths = doc.get("paths")
    if not isinstance(paths, dict):
        raise ValueError("the OpenAPI document has no 'paths' object")
    refs = _Refs(doc, max_schema_bytes)
    table: Table = {}
    skipped: list[str] = []
    for path, raw_item in paths.items():
        item = refs.deref(raw_item, f"paths.{path}")
        if not isinstance(path, str) or not path.startswith("/") or not isinstance(item, dict):
            continue
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            where = f"{method.upper()} {path}"
            op_id = op.get("operationId")
            if not isinstance(op_id, str) or not op_id.strip():
                skipped.append(f"{where}: no operationId")
                continue
            if op_id in table:
                raise ValueError(f"operationId {op_id!r} is used twice ({where})")
            refs.start(f"{where} ({op_id})")
            entry = _operation(refs, method.upper(), path, item, op, where)
            if isinstance(entry, str):
                skipped.append(f"{where} ({op_id}): {entry}")
                continue
            table[op_id] = entry
            if len(table) > MAX_OPERATIONS:
                raise ValueError(f"the OpenAPI document has over {MAX_OPERATIONS} operations; "
                                 f"declare the ones this agent serves in 'capabilities'")
    for name, override in (overrides or {}).items():
        table[name] = {**table.get(name, {}), **override}
    if not table:
        raise ValueError("the OpenAPI document has no operation with an operationId"
                         + (f" ({'; '.join(skipped[:5])})" if skipped else ""))
    return table, skipped


def _operation(refs: _Refs, method: str, path: str, item: dict[str, Any], op: dict[str, Any],
               where: str) -> dict[str, Any] | str:
    """One operation's capability entry, or why it cannot be one."""
    declared: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:
        param = refs.deref(raw, where)
        if isinstance(param, dict) and isinstance(param.get("name"), str):
            declared[param["name"], str(param.get("in"))] = param  # the operation's win
    props: dict[str, Any] = {}  # the query and path parameters
    required: list[str] = []
    query: list[str] = []
    for (name, where_in), param in declared.items():
        if where_in not in ("path", "query"):
            continue  # header and cookie parameters are the operator's (agent headers)
        prop = refs.schema(param.get("schema", {}), where)
        if isinstance(param.get("description"), str) and isinstance(prop, dict):
            prop = {**prop, "description": _clean(param["description"])}
        props[name] = prop
        if where_in == "query":
            query.append(name)
        if where_in == "path" or param.get("required") is True:
            required.append(name)
    entry: dict[str, Any] = {"method": method, "path": path,
                             "idempotent": method in IDEMPOTENT}
    summary = op.get("summary") or op.get("description")
    if isinstance(summary, str) and summary.strip():
        entry["description"] = _clean(summary)
    body = _json_body(refs, op, where)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if method not in QUERY_METHODS and query:
        entry["query"] = query  # sent in the query string, not the body
    if method not in QUERY_METHODS and body is not None:
        if body.get("type") not in (None, "object"):
            return f"its JSON body is a {body.get('type')}, and params are an object"
        schema = {"allOf": [body, schema]} if props else body
    entry["params"] = refs.finish(schema)
    return entry


def _json_body(refs: _Refs, op: dict[str, Any], where: str) -> dict[str, Any] | None:
    """The schema of the operation's JSON request body, if it has one."""
    body = refs.deref(op.get("requestBody"), where)
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, dict):
        return None
    for media, spec in content.items():
        kind = str(media).split(";")[0].strip().lower()
        if kind == "application/json" or kind.endswith("+json"):
            schema = refs.schema(spec.get("schema", {}) if isinstance(spec, dict) else {}, where)
            return schema if isinstance(schema, dict) else {}
    return None


def _clean(text: str) -> str:
    """Free text as a capability field accepts it: no control characters, bounded."""
    return _CONTROL.sub(" ", text).strip()[:5000]


class _Refs:
    """Local references of one document: followed for parameters and bodies, rewritten to
    ``$defs`` inside schemas (and the components used collected for ``finish``)."""

    def __init__(self, doc: dict[str, Any], max_bytes: int = MAX_SCHEMA_BYTES) -> None:
        self.doc = doc
        self.used: dict[str, Any] = {}
        self.max_bytes = max_bytes
        self.spent = 0  # bytes the current operation's schema takes at least, so far
        self.operation = ""

    def start(self, operation: str) -> None:
        """A new operation's schema begins: nothing used, nothing spent."""
        self.used, self.spent, self.operation = {}, 0, operation

    def _spend(self, cost: int) -> None:
        self.spent += cost
        if self.spent > self.max_bytes:
            raise Refused(
                f"{self.operation}: its params schema is over {self.max_bytes} bytes once "
                f"its $refs are expanded (the limit of one capability's params schema): make "
                f"the schema or the components it uses smaller")

    def deref(self, node: Any, where: str) -> Any:
        """``node``, or what its ``$ref`` chain points to."""
        for _ in range(MAX_HOPS):
            if not isinstance(node, dict) or "$ref" not in node:
                return node
            node = self.pointer(node["$ref"], where)
        raise ValueError(f"{where}: a chain of over {MAX_HOPS} $ref")

    def pointer(self, ref: Any, where: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise ValueError(
                f"{where}: $ref {ref!r} points outside the document; only local "
                f"'#/components/...' references are followed (the coordinator never opens a "
                f"URL or a file a schema names, docs/security.md): inline it or move it "
                f"under #/components")
        node: Any = self.doc
        for part in ref[2:].split("/"):
            key = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            elif isinstance(node, dict) and key in node:
                node = node[key]
            else:
                raise ValueError(f"{where}: $ref {ref!r} points at nothing in the document")
        return node

    def schema(self, node: Any, where: str) -> Any:
        """A copy of ``node`` with each ``#/components/schemas/X`` reference rewritten to
        ``#/$defs/X`` (X is collected); any other reference is refused."""
        # Each value is charged no more than its compact JSON text takes (a container its
        # brackets, a string its quotes and text, a key its quotes and colon, a comma per
        # item), so a refusal is never wrong; it comes before the copy grows past the limit.
        if isinstance(node, list):
            self._spend(1 + max(1, len(node)))
            return [self.schema(v, where) for v in node]
        if not isinstance(node, dict):
            self._spend(len(node) + 2 if isinstance(node, str) else 1)
            return node
        self._spend(1 + max(1, len(node)))
        out: dict[str, Any] = {}
        for key, value in node.items():
            self._spend(len(key) + 3 if isinstance(key, str) else 3)
            if key == "$ref" and isinstance(value, str):
                out[key] = self._rewrite(value, where)
                self._spend(len(out[key]) + 2)
            else:
                out[key] = self.schema(value, where)
        return out

    def _rewrite(self, ref: str, where: str) -> str:
        if not ref.startswith(_SCHEMAS):
            self.pointer(ref, where)  # refuses a remote one with the reason
            raise ValueError(f"{where}: $ref {ref!r}: inside a schema only "
                             f"'{_SCHEMAS}...' references are followed")
        name = unquote(ref[len(_SCHEMAS):].split("/")[0]).replace("~1", "/").replace("~0", "~")
        if name not in self.used:
            target = self.pointer(_SCHEMAS + ref[len(_SCHEMAS):].split("/")[0], where)
            self.used[name] = None  # before the walk: a recursive schema refers to itself
            self.used[name] = self.schema(target, f"{where}: {_SCHEMAS}{name}")
        return "#/$defs/" + ref[len(_SCHEMAS):]

    def finish(self, schema: dict[str, Any]) -> dict[str, Any]:
        """``schema`` with the components it used under ``$defs`` (then forgotten)."""
        if not self.used:
            return schema
        defs, self.used = self.used, {}
        if "$ref" in schema:  # a root $ref would hide its sibling $defs in drafts ≤ 7
            schema = {"allOf": [schema]}
        return {**schema, "$defs": defs}
