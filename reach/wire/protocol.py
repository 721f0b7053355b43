"""Wire frames: every message on an Agent-Reach websocket, as versioned pydantic models.

Each frame is one JSON object (a websocket text message) with ``v`` (protocol version, now 1)
and ``type``. docs/protocol.md documents the encoding for agents written without the SDK.

    agent  → reach : register, heartbeat, ack, result, error, chunk, deregister
    reach  → agent : welcome, invoke, cancel, error
    caller → reach : hello, submit, status, result (await a task's outcome)
    reach  → caller: welcome, accepted, task, result, chunk, error
    admin  → reach : admin, command          reach → admin: snapshot, delta, reply, error

``parse`` turns raw text into a frame or raises ``ProtocolError`` with a message that says what
was wrong; ``dump`` turns a frame into text.

Everything a peer sends is bounded here, before it reaches the core: JSON nesting (at most
``MAX_DEPTH`` levels), every number (finite, in a stated range), every list (a maximum count)
and every string (a maximum length and a character class):

    name   identifiers (agent, caller, capability, tags, ids, keys, version, action): no
           control characters (C0, DEL, C1), bidi controls, line/paragraph separators or
           invisible format characters (zero-width, soft hyphen, BOM, tag characters)
    label  one-line free text (intents): printable Unicode, zero-width joiners allowed
    text   multi-line free text (description, intent): a label that may also hold \\n and \\t

Error messages from peers are free text too, but they carry a task's outcome, so they are
cleaned (``\\uXXXX`` escapes) and shortened rather than refused.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import to_json

from reach.errors import ProtocolError

VERSION = 1
SUPPORTED_VERSIONS = frozenset({VERSION})

# ---------------------------------------------------------------- bounds

MAX_DEPTH = 200  # pydantic-core's JSON parser refuses deeper nesting; we say so plainly
MAX_ID = 2**53 - 1  # request ids and chunk seqs: integers every JSON peer represents exactly
MAX_COUNT = 10_000_000  # heartbeat inflight / queue_depth
MAX_ATTEMPT = 1_000_000
MAX_LOAD = 1000.0  # 0–1 is the documented scale; above 1 means overloaded, tolerated
MAX_TIMEOUT = 31_536_000.0  # one year, in seconds
MAX_LATENCY_MS = 1e9  # about 11.6 days
MAX_CAPABILITIES = 10_000  # hard protocol bound; the coordinator's configured cap is lower
MAX_MESSAGE = 10_000  # error messages longer than this are shortened

# Character classes, as (first, last) code point ranges. Bidi controls reorder what a log
# line or a terminal shows ("Trojan Source"); separators and C0/C1 forge log lines and carry
# raw ESC sequences into terminals and Prometheus text; invisible characters make two names
# that look alike differ.
_C0_C1 = ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F))  # all but \t and \n
_TAB_LF = ((0x09, 0x0A),)
_BIDI = ((0x061C, 0x061C), (0x200E, 0x200F), (0x202A, 0x202E), (0x2066, 0x2069))
_SEPARATORS = ((0x2028, 0x2029),)
_INVISIBLE = ((0x00AD, 0x00AD), (0x180E, 0x180E), (0x200B, 0x200D), (0x2060, 0x2064),
              (0x206A, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0xE0000, 0xE007F))
_TEXT_BAD = _C0_C1 + _BIDI + _SEPARATORS
_LABEL_BAD = _TEXT_BAD + _TAB_LF
_NAME_BAD = _LABEL_BAD + _INVISIBLE


def _rust_pattern(bad: tuple[tuple[int, int], ...]) -> str:
    # pydantic-core checks `pattern` with Rust's regex crate: no Python call per field.
    ranges = "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in bad)
    return f"^[^{ranges}]*$"


def _py_class(bad: tuple[tuple[int, int], ...]) -> re.Pattern[str]:
    return re.compile("[" + "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in bad) + "]")


_NAME = _rust_pattern(_NAME_BAD)
_LABEL = _rust_pattern(_LABEL_BAD)
_TEXT = _rust_pattern(_TEXT_BAD)
_TRACEPARENT = r"^ *[0-9A-Fa-f]{2}-[0-9A-Fa-f]{32}-[0-9A-Fa-f]{16}-[0-9A-Fa-f]{2} *$"
# What a pattern mismatch means, for `_explain`: the rule, and how to find the culprit.
_RULES: dict[str, tuple[str, re.Pattern[str] | None]] = {
    _NAME: ("must not contain control characters, bidi controls, line separators or "
            "invisible characters", _py_class(_NAME_BAD)),
    _LABEL: ("must not contain control characters (not even \\n or \\t), bidi controls or "
             "line separators", _py_class(_LABEL_BAD)),
    _TEXT: ("must not contain control characters other than \\n and \\t, bidi controls or "
            "line separators", _py_class(_TEXT_BAD)),
    _TRACEPARENT: ("must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>", None),
}
_TEXT_CLEAN = _py_class(_TEXT_BAD)


def _clean_message(value: str) -> str:
    value = _TEXT_CLEAN.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value if len(value) <= MAX_MESSAGE else value[:MAX_MESSAGE - 1] + "…"


Name = Annotated[str, Field(pattern=_NAME)]
"""An identifier: printable, one line, nothing invisible. Lengths are set per field."""
Label = Annotated[str, Field(pattern=_LABEL)]
Text = Annotated[str, Field(pattern=_TEXT)]
TraceParent = Annotated[str, Field(max_length=200, pattern=_TRACEPARENT)]
Tag = Annotated[str, Field(min_length=1, max_length=100, pattern=_NAME)]
Intent = Annotated[str, Field(min_length=1, max_length=500, pattern=_LABEL)]
Token = Annotated[str, Field(max_length=4096)]
RequestId = Annotated[int, Field(ge=-MAX_ID, le=MAX_ID)]
Attempt = Annotated[int, Field(ge=0, le=MAX_ATTEMPT)]
TaskId = Annotated[str, Field(max_length=200, pattern=_NAME)]


class Frame(BaseModel):
    # allow_inf_nan: JSON has no NaN or Infinity, yet parsers (Python's json.dumps among them)
    # emit them, and 1e999 decodes to inf; no number field accepts them.
    model_config = ConfigDict(extra="ignore", frozen=False, allow_inf_nan=False)
    v: Literal[1] = 1


# ---------------------------------------------------------------- shared pieces

class CapabilitySpec(BaseModel):
    """What an agent declares it can do."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    name: Name = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict, description="JSON schema of the params")
    scope: Literal["read", "write"] = "read"
    latency_ms: float = Field(default=1000.0, gt=0, le=MAX_LATENCY_MS,
                              description="expected latency, finite, at most 1e9 ms")
    weight: float = Field(default=50.0, gt=0, le=1000)
    idempotent: bool = False
    streaming: bool = False
    hedge: bool = False  # idempotent reads: send one hedge to another agent past the P95
    tags: list[Tag] = Field(default_factory=list, max_length=100,
                            description="at most 100 names of 1–100 characters")
    intents: list[Intent] = Field(default_factory=list, max_length=100,
                                  description="at most 100 one-line phrases of 1–500 "
                                              "characters, any language")
    description: Text = Field(default="", max_length=5000,
                              description="free text, at most 5000 characters; \\n and \\t "
                                          "allowed, other control characters not")


class WireError(BaseModel):
    """The error object of an ``error`` frame. ``message`` is free text, cleaned on arrival:
    control characters other than \\n and \\t, bidi controls and line separators become
    ``\\uXXXX`` escapes, and text past ``MAX_MESSAGE`` characters is cut (an outcome is never
    refused for its wording)."""

    model_config = ConfigDict(extra="ignore")
    code: Name = Field(min_length=1, max_length=100)
    message: Annotated[str, AfterValidator(_clean_message)]
    details: dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------- agent side

class Register(Frame):
    type: Literal["register"] = "register"
    name: Name = Field(min_length=1, max_length=200)
    token: Token | None = None
    version: Name = Field(default="0", max_length=100)
    max_concurrency: int = Field(default=20, ge=1, le=100_000)
    capabilities: list[CapabilitySpec] = Field(min_length=1, max_length=MAX_CAPABILITIES)
    # New for every agent process (the SDK: per Agent object). A known agent coming back with
    # another instance has lost its idempotency cache, so work it may have done is not re-sent.
    instance: Name | None = Field(default=None, max_length=200)


class Heartbeat(Frame):
    """``inflight`` and ``queue_depth`` are counts (0–10 000 000); ``load`` is finite, 0–1 by
    convention, tolerated up to 1000 (overloaded)."""

    type: Literal["heartbeat"] = "heartbeat"
    inflight: int = Field(default=0, ge=0, le=MAX_COUNT)
    queue_depth: int = Field(default=0, ge=0, le=MAX_COUNT)
    load: float = Field(default=0.0, ge=0, le=MAX_LOAD)


class Ack(Frame):
    type: Literal["ack"] = "ack"
    task_id: TaskId
    attempt: Attempt = 0


class Result(Frame):
    """Agent → reach: a task's answer. Reach → caller: the outcome. Caller → reach: await it."""

    type: Literal["result"] = "result"
    task_id: TaskId
    attempt: Attempt = 0
    id: RequestId | None = None
    trace_id: TaskId | None = None  # set when this frame also acknowledges the submit
    result: Any = None


class Error(Frame):
    """An error about a task (``task_id``), a request (``id``), or the connection (neither)."""

    type: Literal["error"] = "error"
    task_id: TaskId | None = None
    attempt: Attempt = 0
    id: RequestId | None = None
    trace_id: TaskId | None = None  # set when this frame also acknowledges the submit
    error: WireError


class Chunk(Frame):
    type: Literal["chunk"] = "chunk"
    task_id: TaskId
    attempt: Attempt = 0
    id: RequestId | None = None
    seq: int = Field(default=0, ge=0, le=MAX_ID)
    data: Any = None


class Deregister(Frame):
    type: Literal["deregister"] = "deregister"


class Welcome(Frame):
    type: Literal["welcome"] = "welcome"
    role: Literal["agent", "caller"] = "agent"
    agent_id: Name | None = Field(default=None, max_length=200)
    heartbeat_interval: float = Field(default=10.0, gt=0, le=86_400)
    max_frame_bytes: int = Field(default=1 << 20, ge=1, le=1 << 32)
    capabilities: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES)
    warnings: list[Annotated[str, Field(max_length=2000)]] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES)


class Invoke(Frame):
    type: Literal["invoke"] = "invoke"
    task_id: TaskId
    attempt: Attempt = 0
    capability: Name = Field(max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: Name = Field(max_length=400)
    trace_id: TaskId
    parent_task_id: TaskId | None = None
    traceparent: TraceParent | None = None
    deadline_ms: float | None = Field(default=None, ge=0, le=MAX_TIMEOUT * 1000)
    caller: Name = Field(default="", max_length=200)


class Cancel(Frame):
    type: Literal["cancel"] = "cancel"
    task_id: TaskId
    attempt: Attempt = 0


# ---------------------------------------------------------------- caller side

class Hello(Frame):
    type: Literal["hello"] = "hello"
    caller: Name = Field(default="anonymous", min_length=1, max_length=200)
    token: Token | None = None


class AdminHello(Frame):
    """Operator → reach: the first frame of an admin-feed session (docs/admin-feed.md)."""

    type: Literal["admin"] = "admin"
    token: Token | None = None


class Command(Frame):
    """Operator → reach: an admin action; answered by a ``reply`` with the same ``id``."""

    type: Literal["command"] = "command"
    id: RequestId
    action: Name = Field(min_length=1, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)


class Submit(Frame):
    """``timeout`` is finite seconds, at most a year; ``intent`` is free text (\\n and \\t
    allowed); every identifier is a name (see the module docstring)."""

    type: Literal["submit"] = "submit"
    id: RequestId
    capability: Name = Field(default="", max_length=200)
    intent: Text | None = Field(default=None, max_length=2000)
    params: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: Name | None = Field(default=None, max_length=400)
    priority: int = Field(default=5, ge=0, le=9)
    timeout: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT)
    max_retries: int | None = Field(default=None, ge=0, le=100)
    trace_id: TaskId | None = None
    parent_task_id: TaskId | None = None
    traceparent: TraceParent | None = None
    wait: bool = True
    defer_ack: bool = False  # only the outcome matters: skip `accepted` if the outcome is quick
    hedge: bool | None = None  # None: as the capability declares


class Status(Frame):
    type: Literal["status"] = "status"
    id: RequestId
    task_id: TaskId


class Accepted(Frame):
    type: Literal["accepted"] = "accepted"
    id: RequestId
    task_id: TaskId
    trace_id: TaskId
    duplicate: bool = False


class TaskInfo(Frame):
    """Reach → caller: the answer to ``status``."""

    type: Literal["task"] = "task"
    id: RequestId
    task: dict[str, Any]


AnyFrame = Annotated[
    Register | Heartbeat | Ack | Result | Error | Chunk | Deregister | Welcome | Invoke
    | Cancel | Hello | Submit | Status | Accepted | TaskInfo | AdminHello | Command,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyFrame)
FRAME_TYPES = frozenset(
    ("register", "heartbeat", "ack", "result", "error", "chunk", "deregister", "welcome",
     "invoke", "cancel", "hello", "submit", "status", "accepted", "task", "admin", "command")
)


def parse(raw: str | bytes) -> Any:
    """Decode one frame; raise ``ProtocolError`` saying precisely what is wrong with it.

    Nothing else escapes: bounded in depth (``MAX_DEPTH``), in CPU (one linear decode, and
    on the error path one more that skips everything but ``v``, ``type`` and ``id``)."""
    if not _starts_object(raw):
        # Not an object: validating it would only build the whole value to report it.
        raise _not_an_object(raw)
    try:
        return _ADAPTER.validate_json(raw)
    except ValidationError as exc:
        raise _explain(raw, exc) from None


def dump(frame: Frame) -> str:
    """Encode one frame as JSON text."""
    return frame.model_dump_json(exclude_none=True)


def encode(kind: str, **fields: Any) -> str:
    """Encode a frame of type ``kind`` straight from its fields (None fields left out).

    The hot path's shortcut around building a model only to serialize it: the same JSON as
    ``dump(Model(...))`` (a test pins that), at a fraction of the cost."""
    frame = {"v": VERSION, "type": kind}
    for key, value in fields.items():
        if value is not None:
            frame[key] = value
    return to_json(frame).decode()


def request_id(raw: str | bytes) -> int | None:
    """The ``id`` of a frame that failed to parse, if it has a usable one."""
    head = _peek(raw)
    value = head.id if isinstance(head, _Head) else None
    if isinstance(value, int) and not isinstance(value, bool) and -MAX_ID <= value <= MAX_ID:
        return value
    return None


# ---------------------------------------------------------------- explaining a bad frame

class _Head(BaseModel):
    """The top-level fields an explanation needs; the rest of a frame is skipped unbuilt."""

    model_config = ConfigDict(extra="ignore")
    v: Any = VERSION
    type: Any = None
    id: Any = None
    deep: bool = False  # set by `_peek`: the frame nests deeper than MAX_DEPTH


_HEAD: TypeAdapter[_Head] = TypeAdapter(_Head)
_OBJECT_START = re.compile(r"[ \t\n\r]*\{")
_OBJECT_START_BYTES = re.compile(rb"[ \t\n\r]*\{")
_COLUMN = re.compile(r"at line 1 column (\d+)")
_NOT_JSON = "frame is not valid JSON; send one JSON object per text message"
_NOT_OBJECT = "frame must be a JSON object with 'v' and 'type'"


def _starts_object(raw: str | bytes) -> bool:
    if isinstance(raw, str):
        return _OBJECT_START.match(raw) is not None
    return _OBJECT_START_BYTES.match(raw) is not None


def _not_an_object(raw: str | bytes) -> ProtocolError:
    if len(raw) > 4096:  # not worth decoding to tell the two apart
        return ProtocolError(_NOT_OBJECT)
    try:
        TypeAdapter(Any).validate_json(raw)
    except ValidationError:
        return ProtocolError(_NOT_JSON)
    return ProtocolError(_NOT_OBJECT)


def _peek(raw: str | bytes) -> _Head | ProtocolError:
    """``v``, ``type`` and ``id`` of a JSON object, or what stops reading them."""
    if not _starts_object(raw):
        return _not_an_object(raw)
    try:
        return _HEAD.validate_json(raw)
    except ValidationError as exc:
        why = str(exc.errors(include_url=False, include_input=False)[0]["msg"])
    if "recursion limit exceeded" not in why:
        return ProtocolError(_NOT_JSON)
    # Too deep. Read the head from the part before the limit: a frame's own fields usually
    # come before its payload (the SDKs send `v`, `type`, `id` first). Newlines are outside
    # strings in valid JSON, so turning them into spaces puts the limit on line 1.
    try:
        flat = (raw.encode() if isinstance(raw, str) else raw).replace(b"\n", b" ")
        _HEAD.validate_json(flat)
    except UnicodeEncodeError:
        return ProtocolError(_NOT_JSON)
    except ValidationError as exc:
        where = _COLUMN.search(str(exc.errors(include_url=False, include_input=False)[0]["msg"]))
        if where is not None:
            try:
                head = _HEAD.validate_json(flat[:int(where.group(1)) - 1],
                                           experimental_allow_partial=True)
            except ValidationError:
                pass
            else:
                head.deep = True
                return head
    return ProtocolError(f"frame nests JSON more than {MAX_DEPTH} levels deep; flatten it")


def _shown(value: Any) -> str:
    # ascii(): the echo stays short in bytes too (a close reason is at most 123 bytes).
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _explain(raw: str | bytes, exc: ValidationError) -> ProtocolError:
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
    if head.deep:
        return ProtocolError(f"invalid {kind!r} frame: it nests JSON more than {MAX_DEPTH} "
                             f"levels deep; flatten it", type=kind)
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ())[1:])[:200] or "frame"
    return ProtocolError(f"invalid {kind!r} frame: {where}: {_reason(first)}", type=kind,
                         field=where)


def _reason(error: Any) -> str:
    rule = _RULES.get(error.get("ctx", {}).get("pattern", "")) \
        if error.get("type") == "string_pattern_mismatch" else None
    if rule is None:
        return str(error.get("msg"))[:300]
    words, culprit = rule
    found = culprit.search(error.get("input", "")) if culprit is not None else None
    if found is None:
        return words
    return f"{words} (found U+{ord(found.group()):04X} at index {found.start()})"
