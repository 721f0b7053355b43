"""Wire frames: every message on an Agent-Reach websocket, as versioned pydantic models.

Each frame is one JSON object (a websocket text message) with ``v`` (protocol version, now 1)
and ``type``. docs/protocol.md documents the encoding for agents written without the SDK.

    agent  → reach : register, heartbeat, ack, result, error, chunk, deregister, probe_result
    reach  → agent : welcome, invoke, cancel, error, probe
    caller → reach : hello, submit, status, result (await a task's outcome)
    reach  → caller: welcome, accepted, task, result, chunk, error
    admin  → reach : admin, command          reach → admin: snapshot, delta, reply, error

``parse`` turns raw text into a frame or raises ``ProtocolError`` with a message that says what
was wrong (reach.wire.explain); ``dump`` turns a frame into text. What a frame may hold is
bounded field by field (reach.wire.bounds); the admin feed's frames are in reach.wire.admin.

Frames in are validated; frames out are built with ``unchecked(Model)(...)``: the same typed
constructor, without re-validating what the coordinator itself made (see ``unchecked``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
)

from reach.wire.bounds import (
    FRAME_TYPES,
    MAX_ATTEMPT,
    MAX_CAPABILITIES,
    MAX_COUNT,
    MAX_DEPTH,
    MAX_ID,
    MAX_LATENCY_MS,
    MAX_LOAD,
    MAX_MESSAGE,
    MAX_TIMEOUT,
    SUPPORTED_VERSIONS,
    VERSION,
    Attempt,
    Intent,
    Name,
    RequestId,
    Tag,
    TaskId,
    Text,
    Token,
    TraceParent,
    clean_message,
)
from reach.wire.explain import explain, not_an_object, request_id, starts_object
from reach.wire.fallbacks import Fallback, fallback_of
from reach.wire.numbers import check_parsed
from reach.wire.unchecked import unchecked

__all__ = [
    "FRAME_TYPES", "MAX_ATTEMPT", "MAX_CAPABILITIES", "MAX_COUNT", "MAX_DEPTH", "MAX_ID",
    "MAX_LATENCY_MS", "MAX_LOAD", "MAX_MESSAGE", "MAX_TIMEOUT", "SUPPORTED_VERSIONS", "VERSION",
    "Accepted", "Ack", "AdminHello", "AnyFrame", "CapabilitySpec", "Cancel", "Chunk", "Command",
    "Deregister", "Error", "Frame", "Heartbeat", "Hello", "Invoke", "Probe", "ProbeResult",
    "Register", "Result",
    "Status", "Submit", "TaskInfo", "Welcome", "WireError", "dump", "fallback_of", "oversize",
    "parse", "request_id", "unchecked",
]

StepName = Annotated[Name, Field(min_length=1, max_length=200)]  # a chain step's capability


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
    returns: dict[str, Any] | None = Field(
        default=None, description="JSON schema every result must fit (null: not checked); a "
                                  "result that breaks it is the agent's fault (bad_result)")
    fallback: Fallback = Field(default=None, description="what callers get when no agent can "
                                                         "answer (reach.core.fallback)")
    scope: Literal["read", "write"] = "read"
    latency_ms: float | None = Field(
        default=None, gt=0, le=MAX_LATENCY_MS,
        description="expected latency, finite, at most 1e9 ms; null: not declared (the "
                    "completion timeout is then the coordinator's default_timeout until the "
                    "capability has a record of successes, docs/protocol.md §8)")
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
    # Warm-up and bulkheads (docs/protocol.md §7, §8): seconds over which a new or recovered
    # agent's share ramps up (None: the coordinator's default), and this capability's own
    # limit on calls in flight at one agent (None: only its latency tier's share).
    warmup_s: float | None = Field(default=None, ge=0, le=MAX_TIMEOUT)
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_COUNT)


class WireError(BaseModel):
    """The error object of an ``error`` frame. ``message`` is free text, cleaned on arrival:
    control characters other than \\n and \\t, bidi controls and line separators become
    ``\\uXXXX`` escapes, and text past ``MAX_MESSAGE`` characters is cut (an outcome is never
    refused for its wording)."""

    model_config = ConfigDict(extra="ignore")
    code: Name = Field(min_length=1, max_length=100)
    message: Annotated[str, AfterValidator(clean_message)]
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
    # Optional (v1 peers leave them out): the agent answers ``probe`` frames from its serving
    # path, and the heartbeat and probe intervals it asks for (the coordinator bounds them
    # and says what it granted in ``welcome``).
    probes: bool = False
    heartbeat_interval: float | None = Field(default=None, gt=0, le=86_400)
    probe_interval: float | None = Field(default=None, gt=0, le=86_400)


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
    fallback: dict[str, Any] | None = None  # R→C: this result is a fallback (kind, reason…)


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
    role: Literal["agent", "caller", "peer"] = "agent"
    node: Name | None = Field(default=None, max_length=200)  # to a peer: this node's id
    agent_id: Name | None = Field(default=None, max_length=200)
    heartbeat_interval: float = Field(default=10.0, gt=0, le=86_400)
    max_frame_bytes: int = Field(default=1 << 20, ge=1, le=1 << 32)
    capabilities: list[Annotated[str, Field(max_length=200)]] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES)
    warnings: list[Annotated[str, Field(max_length=2000)]] = Field(
        default_factory=list, max_length=MAX_CAPABILITIES)
    # agents that said ``probes: true``: how often a probe comes (seconds)
    probe_interval: float | None = Field(default=None, gt=0, le=86_400)


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
    """Reach → agent: stop this attempt (it was given up). Caller → Reach: cancel this task
    (``id`` set: answered with a ``task`` frame of the same ``id``, or an ``error``)."""

    type: Literal["cancel"] = "cancel"
    task_id: TaskId
    attempt: Attempt = 0
    id: RequestId | None = None
    # Peer links (§14): false, the holder frees the attempt's slot without telling its agent
    # to stop (a write past its timeout is left to finish); true, the agent is told.
    stop: bool = True


class Probe(Frame):
    """Reach → agent: a health probe; answer it with ``probe_result`` of the same ``id`` from
    the serving path (the same slots and threads as real work), not the heartbeat task."""

    type: Literal["probe"] = "probe"
    id: RequestId


class ProbeResult(Frame):
    """Agent → reach: the answer to ``probe`` ``id``; ``ok: false`` when the agent's own health
    check failed (``detail`` says why, at most 2000 characters)."""

    type: Literal["probe_result"] = "probe_result"
    id: RequestId
    ok: bool = True
    detail: Annotated[str, AfterValidator(clean_message)] = Field(default="", max_length=2000)


# ---------------------------------------------------------------- caller side

class Hello(Frame):
    """A caller's first frame; with ``role: "peer"``, another coordinator's (``node`` is its
    id, ``nonce`` its half of the challenge–response that proves the peer secret without
    sending it: docs/protocol.md §14; a peer hello carries no ``token``)."""

    type: Literal["hello"] = "hello"
    caller: Name = Field(default="anonymous", min_length=1, max_length=200)
    token: Token | None = None
    role: Literal["caller", "peer"] | None = None  # None (left out): a caller
    node: Name | None = Field(default=None, max_length=200)
    nonce: str | None = Field(default=None, pattern=r"^[0-9a-f]{32,128}$")


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
    # Seconds it may wait its turn for a free slot or an agent (§8, the backlog); absent: a
    # submit waits until its deadline (else the coordinator's max_wait), a ``defer_ack`` call
    # waits ``queue_wait`` for a slot and fails fast when no agent can take it
    queue_wait: float | None = Field(default=None, ge=0, le=MAX_TIMEOUT)
    hedge: bool | None = None  # None: as the capability declares
    # Only agents whose capability declares these tags are candidates (reach.core.tags):
    # "key": "value" needs the tag "key=value", "key": true the tag "key" (any value).
    tags: dict[Tag, Annotated[Tag, Strict()] | Annotated[bool, Strict()]] | None = Field(
        default=None, max_length=16)
    fallback: Fallback = None  # this call's fallback (over the capability's own)
    # Where the outcome goes besides the caller: a webhook POSTed when the task ends, and a
    # chain's next steps (reach.core.chains checks their shape and names at the gateway).
    notify: Annotated[str, Field(max_length=2000, pattern=r"^https?://\S+$")] | None = None
    then: StepName | Annotated[list[StepName | dict[str, Any]], Field(max_length=8)] | None = None


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
    | Cancel | Hello | Submit | Status | Accepted | TaskInfo | AdminHello | Command | Probe
    | ProbeResult,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyFrame)
_VALIDATE_JSON = _ADAPTER.validator.validate_json  # (the adapter's own method only forwards)

def parse(raw: str | bytes) -> Any:
    """Decode one frame; raise ``ProtocolError`` saying precisely what is wrong with it (or
    ``InvalidParams`` for a well-formed submit whose params are not an object).

    Nothing else escapes: bounded in depth (``MAX_DEPTH``), in CPU (one linear decode, one
    regex search of the text for what could be a NaN or infinite number and, only when it
    finds one, a walk of the free payload's containers (reach.wire.numbers), and on the
    error path one more decode that skips everything but ``v``, ``type`` and ``id``)."""
    if not starts_object(raw):
        # Not an object: validating it would only build the whole value to report it.
        raise not_an_object(raw)
    try:
        frame = _VALIDATE_JSON(raw)
    except ValidationError as exc:
        raise explain(raw, exc) from None
    check_parsed(frame, raw)  # NaN, Infinity or 1e400 in a free payload: JSON cannot carry them
    return frame


def dump(frame: BaseModel) -> str:
    """Encode one frame as JSON text: fields that are None are left out (at any depth of the
    model's own fields; inside a free payload such as ``params`` or ``result``, None stays)."""
    return frame.__pydantic_serializer__.to_json(frame, exclude_none=True).decode()


def oversize(text: str, limit: int) -> int | None:
    """The size in bytes of a frame over ``limit``, or None when it fits. A text of at most
    ``limit // 4`` characters fits whatever it holds (UTF-8 takes at most 4 bytes a
    character), so the common case is decided without encoding it."""
    if len(text) <= limit // 4:
        return None
    size = len(text.encode())
    return size if size > limit else None
