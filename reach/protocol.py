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
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import to_json

from .errors import ProtocolError

VERSION = 1
SUPPORTED_VERSIONS = frozenset({VERSION})


class Frame(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)
    v: Literal[1] = 1


# ---------------------------------------------------------------- shared pieces

class CapabilitySpec(BaseModel):
    """What an agent declares it can do."""

    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict, description="JSON schema of the params")
    scope: Literal["read", "write"] = "read"
    latency_ms: float = Field(default=1000.0, gt=0)
    weight: float = Field(default=50.0, gt=0, le=1000)
    idempotent: bool = False
    streaming: bool = False
    hedge: bool = False  # idempotent reads: send one hedge to another agent past the P95
    tags: list[str] = Field(default_factory=list)
    intents: list[str] = Field(default_factory=list)
    description: str = ""


class WireError(BaseModel):
    model_config = ConfigDict(extra="ignore")
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


# ---------------------------------------------------------------- agent side

class Register(Frame):
    type: Literal["register"] = "register"
    name: str = Field(min_length=1, max_length=200)
    token: str | None = None
    version: str = "0"
    max_concurrency: int = Field(default=20, ge=1, le=100_000)
    capabilities: list[CapabilitySpec] = Field(min_length=1)
    # New for every agent process (the SDK: per Agent object). A known agent coming back with
    # another instance has lost its idempotency cache, so work it may have done is not re-sent.
    instance: str | None = Field(default=None, max_length=200)


class Heartbeat(Frame):
    type: Literal["heartbeat"] = "heartbeat"
    inflight: int = 0
    queue_depth: int = 0
    load: float = 0.0


class Ack(Frame):
    type: Literal["ack"] = "ack"
    task_id: str
    attempt: int = 0


class Result(Frame):
    """Agent → reach: a task's answer. Reach → caller: the outcome. Caller → reach: await it."""

    type: Literal["result"] = "result"
    task_id: str
    attempt: int = 0
    id: int | None = None
    trace_id: str | None = None  # set when this frame also acknowledges the submit
    result: Any = None


class Error(Frame):
    """An error about a task (``task_id``), a request (``id``), or the connection (neither)."""

    type: Literal["error"] = "error"
    task_id: str | None = None
    attempt: int = 0
    id: int | None = None
    trace_id: str | None = None  # set when this frame also acknowledges the submit
    error: WireError


class Chunk(Frame):
    type: Literal["chunk"] = "chunk"
    task_id: str
    attempt: int = 0
    id: int | None = None
    seq: int = 0
    data: Any = None


class Deregister(Frame):
    type: Literal["deregister"] = "deregister"


class Welcome(Frame):
    type: Literal["welcome"] = "welcome"
    role: Literal["agent", "caller"] = "agent"
    agent_id: str | None = None
    heartbeat_interval: float = 10.0
    max_frame_bytes: int = 1 << 20
    capabilities: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class Invoke(Frame):
    type: Literal["invoke"] = "invoke"
    task_id: str
    attempt: int = 0
    capability: str
    params: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str
    trace_id: str
    parent_task_id: str | None = None
    traceparent: str | None = None
    deadline_ms: float | None = None
    caller: str = ""


class Cancel(Frame):
    type: Literal["cancel"] = "cancel"
    task_id: str
    attempt: int = 0


# ---------------------------------------------------------------- caller side

class Hello(Frame):
    type: Literal["hello"] = "hello"
    caller: str = Field(default="anonymous", min_length=1, max_length=200)
    token: str | None = None


class AdminHello(Frame):
    """Operator → reach: the first frame of an admin-feed session (docs/admin-feed.md)."""

    type: Literal["admin"] = "admin"
    token: str | None = None


class Command(Frame):
    """Operator → reach: an admin action; answered by a ``reply`` with the same ``id``."""

    type: Literal["command"] = "command"
    id: int
    action: str = Field(min_length=1, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)


class Submit(Frame):
    type: Literal["submit"] = "submit"
    id: int
    capability: str = Field(default="", max_length=200)
    intent: str | None = Field(default=None, max_length=2000)
    params: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = Field(default=None, max_length=400)
    priority: int = Field(default=5, ge=0, le=9)
    timeout: float | None = Field(default=None, gt=0)
    max_retries: int | None = Field(default=None, ge=0, le=100)
    trace_id: str | None = None
    parent_task_id: str | None = None
    traceparent: str | None = None
    wait: bool = True
    defer_ack: bool = False  # only the outcome matters: skip `accepted` if the outcome is quick
    hedge: bool | None = None  # None: as the capability declares


class Status(Frame):
    type: Literal["status"] = "status"
    id: int
    task_id: str


class Accepted(Frame):
    type: Literal["accepted"] = "accepted"
    id: int
    task_id: str
    trace_id: str
    duplicate: bool = False


class TaskInfo(Frame):
    """Reach → caller: the answer to ``status``."""

    type: Literal["task"] = "task"
    id: int
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
    """Decode one frame; raise ``ProtocolError`` saying precisely what is wrong with it."""
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
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    value = obj.get("id") if isinstance(obj, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _explain(raw: str | bytes, exc: ValidationError) -> ProtocolError:
    # Only the error path pays for a second decode: it turns pydantic's report into one line
    # an agent author in any language can act on.
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return ProtocolError("frame is not valid JSON; send one JSON object per text message")
    if not isinstance(obj, dict):
        return ProtocolError("frame must be a JSON object with 'v' and 'type'")
    version = obj.get("v", VERSION)
    if not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
        return ProtocolError(
            f"unsupported protocol version {version!r}; this coordinator speaks v{VERSION}",
            supported=sorted(SUPPORTED_VERSIONS),
        )
    kind = obj.get("type")
    if kind is None:
        return ProtocolError(f"frame has no 'type'; expected one of {sorted(FRAME_TYPES)}")
    if not isinstance(kind, str) or kind not in FRAME_TYPES:
        return ProtocolError(
            f"unknown frame type {kind!r}; expected one of {sorted(FRAME_TYPES)}")
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "frame"
    return ProtocolError(f"invalid {kind!r} frame: {where}: {first.get('msg')}", type=kind)
