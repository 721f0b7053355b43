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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
QUERY_METHODS = frozenset({"GET", "HEAD", "DELETE"})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
MAX_OPERATIONS = 1000   # a table larger than this is not one agent
MAX_HOPS = 32           # a chain of references (parameter → parameter → …) longer than this
_SCHEMAS = "#/components/schemas/"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

Table = dict[str, dict[str, Any]]


def capabilities(doc: Any, overrides: Mapping[str, Mapping[str, Any]] | None = None
                 ) -> tuple[Table, list[str]]:
    """The capability table of ``doc`` merged with ``overrides``, and the operations skipped
    (each a line saying why). Raises ``ValueError`` for a document it cannot use."""
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3."):
        raise ValueError("not an OpenAPI 3 document: it has no 'openapi: 3.x' field")
    paths = doc.get("paths")
    if not isinstance(paths, dict):
        raise ValueError("the OpenAPI document has no 'paths' object")
    refs = _Refs(doc)
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
            refs.used = {}
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

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.used: dict[str, Any] = {}

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
        if isinstance(node, list):
            return [self.schema(v, where) for v in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                out[key] = self._rewrite(value, where)
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
