"""Explaining a bad frame: one line an agent author in any language can act on.

Only the error path runs this: a second decode of the frame's head alone (``v``, ``type``,
``id``), bounded in depth and CPU, turns pydantic's report into a ``ProtocolError``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, TypeAdapter, ValidationError

from reach.errors import InvalidParams, ProtocolError
from reach.wire.bounds import FRAME_TYPES, MAX_DEPTH, MAX_ID, RULES, SUPPORTED_VERSIONS, VERSION


def request_id(raw: str | bytes) -> int | None:
    """The ``id`` of a frame that failed to parse, if it has a usable one."""
    head = _peek(raw)
    value = head.id if isinstance(head, _Head) else None
    if isinstance(value, int) and not isinstance(value, bool) and -MAX_ID <= value <= MAX_ID:
        return value
    return None


class _Head(BaseModel):
    """The top-level fields an explanation needs; the rest of a frame is skipped unbuilt."""

    model_config = ConfigDict(extra="ignore")
    v: Any = VERSION
    type: Any = None
    id: Any = None
    # Set by `_peek`: the frame nests deeper than MAX_DEPTH. Private, so a frame's own "deep"
    # key cannot set it (it made any invalid frame with "deep": true explained as too deep).
    _deep: bool = PrivateAttr(default=False)


_HEAD: TypeAdapter[_Head] = TypeAdapter(_Head)
_OBJECT_START = re.compile(r"[ \t\n\r]*\{")
_OBJECT_START_BYTES = re.compile(rb"[ \t\n\r]*\{")
_COLUMN = re.compile(r"at line 1 column (\d+)")
_NOT_JSON = "frame is not valid JSON; send one JSON object per text message"
_NOT_OBJECT = "frame must be a JSON object with 'v' and 'type'"


def starts_object(raw: str | bytes) -> bool:
    if isinstance(raw, str):
        return _OBJECT_START.match(raw) is not None
    return _OBJECT_START_BYTES.match(raw) is not None


def not_an_object(raw: str | bytes) -> ProtocolError:
    if len(raw) > 4096:  # not worth decoding to tell the two apart
        return ProtocolError(_NOT_OBJECT)
    try:
        TypeAdapter(Any).validate_json(raw)
    except ValidationError:
        return ProtocolError(_NOT_JSON)
    return ProtocolError(_NOT_OBJECT)


def _peek(raw: str | bytes) -> _Head | ProtocolError:
    """``v``, ``type`` and ``id`` of a JSON object, or what stops reading them."""
    if not starts_object(raw):
        return not_an_object(raw)
    try:
        return _HEAD.validate_json(raw)
    except ValidationError as exc:
        why = str(exc.errors(include_url=False, include_input=False)[0]["msg"])
    if "recursion limit exceeded" not in why:
        return ProtocolError(_NOT_JSON)
    # Too deep. Read the head from the part before the limit: a frame's own fields usually
    # come before its payload (the SDKs send `v`, `type`, `id` first). Newlines are outside
    # strings in valid JSON, so turning them into spaces puts the limit on line 1.
    # (A str with a lone surrogate never gets here: it is refused as not unicode before any
    # nesting is read; surrogatepass only makes sure nothing can escape if it did.)
    flat = (raw.encode(errors="surrogatepass") if isinstance(raw, str) else raw
            ).replace(b"\n", b" ")
    try:
        _HEAD.validate_json(flat)
    except ValidationError as exc:
        where = _COLUMN.search(str(exc.errors(include_url=False, include_input=False)[0]["msg"]))
        if where is not None:
            try:
                head = _HEAD.validate_json(flat[:int(where.group(1)) - 1],
                                           experimental_allow_partial=True)
            except ValidationError:  # pragma: no cover — the prefix parsed once already
                pass
            else:
                head._deep = True
                return head
    return ProtocolError(f"frame nests JSON more than {MAX_DEPTH} levels deep; flatten it")


def _shown(value: Any) -> str:
    # ascii(): the echo stays short in bytes too (a close reason is at most 123 bytes).
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def explain(raw: str | bytes, exc: ValidationError) -> ProtocolError | InvalidParams:
    # Only the error path pays for a second decode (of the head alone): it turns pydantic's
    # report into one line an agent author in any language can act on.
    head = _peek(raw)
    if isinstance(head, ProtocolError):
        return head
    version, kind = head.v, head.type
    known = {"type": kind} if isinstance(kind, str) and kind in FRAME_TYPES else {}
    if type(version) is not int or version not in SUPPORTED_VERSIONS:
        return ProtocolError(
            f"unsupported protocol version {_shown(version)}; this coordinator speaks "
            f"v{VERSION}", supported=sorted(SUPPORTED_VERSIONS), **known)
    if kind is None:
        return ProtocolError(f"frame has no 'type'; expected one of {sorted(FRAME_TYPES)}")
    if not known:
        unknown = {"type": kind[:100]} if isinstance(kind, str) else {}
        return ProtocolError(
            f"unknown frame type {_shown(kind)}; expected one of {sorted(FRAME_TYPES)}",
            **unknown)
    if head._deep:
        return ProtocolError(f"invalid {kind!r} frame: it nests JSON more than {MAX_DEPTH} "
                             f"levels deep; flatten it", type=kind)
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ())[1:])[:200] or "frame"
    if kind == "submit" and where == "params" and first.get("type") == "dict_type":
        # The frame is fine, the params are not: the caller's mistake, not the SDK author's
        return InvalidParams(f"params must be a JSON object of name: value, not "
                             f"{_json_type(first.get('input'))}", type=kind, field=where)
    return ProtocolError(f"invalid {kind!r} frame: {where}: {_reason(first)}", type=kind,
                         field=where)


def _reason(error: Any) -> str:
    rule = RULES.get(error.get("ctx", {}).get("pattern", "")) \
        if error.get("type") == "string_pattern_mismatch" else None
    if rule is None:
        return str(error.get("msg"))[:300]
    words, culprit = rule
    found = culprit.search(error.get("input", "")) if culprit is not None else None
    if found is None:
        return words
    return f"{words} (found U+{ord(found.group()):04X} at index {found.start()})"


def _json_type(value: Any) -> str:
    """The JSON name of a decoded non-object value's type ("a string", "an array"...)."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (str, "a string"), (list, "an array")):
        if isinstance(value, kind):
            return name
    return "a number"
