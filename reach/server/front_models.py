"""The REST front door's request and response bodies, as pydantic models.

The routes validate what they read with these models and answer with them, and
``front_openapi`` builds ``/openapi.json`` from the same classes: the document cannot drift
from what the server does. Bounds are the wire protocol's (reach.wire.bounds): a caller over
HTTP may send exactly what a websocket caller may. Identifier patterns are written with
``\\UXXXXXXXX`` escapes rather than the Rust-only ``\\x{..}`` form the frame models use, so
that they mean the same to pydantic-core, Python's ``re`` and OpenAPI tools (schemathesis).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    model_validator,
)

from reach.wire import bounds
from reach.wire.fallbacks import Fallback


def _pattern(bad: tuple[tuple[int, int], ...], needs: str = "") -> str:
    """Characters outside ``bad`` only; with ``needs``, at least one outside ``needs`` too."""
    ranges = "".join(f"\\U{a:08X}-\\U{b:08X}" for a, b in bad)
    if not needs:
        return f"^[^{ranges}]*$"
    return f"^[^{ranges}]*[^{ranges}{needs}][^{ranges}]*$"


Name = Annotated[str, Field(pattern=_pattern(bounds.NAME_BAD))]
Text = Annotated[str, Field(pattern=_pattern(bounds.TEXT_BAD))]
# A capability name with at least one word in it (core/names.py splits on these), and an
# intent with something besides spaces: what the gateway refuses otherwise, said up front.
CapabilityName = Annotated[str, Field(pattern=_pattern(bounds.NAME_BAD, r"\s_\-/:."),
                                      min_length=1, max_length=200)]
Intent = Annotated[str, Field(pattern=_pattern(bounds.TEXT_BAD, r"\s"), min_length=1,
                              max_length=2000)]
Params = dict[str, Any]
StepName = CapabilityName  # a chain step (reach.core.chains checks the rest at the gateway)
Steps = Annotated[list[StepName | dict[str, Any]], Field(max_length=8)]
# Routing tags (reach.core.tags): "key": "value" or "key": true, keys without "=".
TagKey = Annotated[str, Field(pattern=_pattern(bounds.NAME_BAD + ((0x3D, 0x3D),)),
                              min_length=1, max_length=100)]


def _true(value: bool) -> bool:
    if not value:
        raise ValueError("a tag asked for is a string value or true (any value), not false")
    return value


TagValue = Annotated[str, Strict(), Field(pattern=_pattern(bounds.NAME_BAD), min_length=1,
                                          max_length=100)] | Annotated[
    bool, Strict(), AfterValidator(_true), WithJsonSchema({"type": "boolean", "const": True})]
Tags = Annotated[dict[TagKey, TagValue] | None, Field(
    default=None, max_length=16, description="only agents whose capability declares these "
    "tags: {\"region\": \"eu\"} needs the tag region=eu, {\"gpu\": true} the tag gpu")]
PROBLEM_TYPE = "https://agent-reach.dev/problems/"  # + code: the `type` of every problem


class _In(BaseModel):
    """A request body: unknown fields are refused (a typo must not be ignored silently)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- requests


class SubmitBody(_In):
    """``POST /v1/tasks``: one durable task. Name a ``capability``, or state an ``intent``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra={
        "anyOf": [{"required": ["capability"], "properties": {"capability": {"type": "string"}}},
                  {"required": ["intent"], "properties": {"intent": {"type": "string"}}}]})
    capability: CapabilityName | None = Field(
        default=None, description="the capability to call, e.g. sales.query")
    intent: Intent | None = Field(default=None, description="free text routed to a "
                                                            "capability, when none is named")
    params: Params = Field(default_factory=dict, description="the capability's params object")
    priority: int = Field(default=5, ge=0, le=9, description="0–9, 9 highest")
    timeout: float | None = Field(default=None, gt=0, le=bounds.MAX_TIMEOUT,
                                  description="seconds the whole task may take, retries "
                                              "included")
    max_retries: int | None = Field(default=None, ge=0, le=100)
    hedge: bool | None = Field(default=None, description="None: as the capability declares")
    tags: Tags = None
    fallback: Fallback = Field(default=None, description="what to answer if no agent can: "
                               "{\"value\": v}, {\"last_good\": {\"max_age_s\": s}} or "
                               "{\"capability\": name} (docs/protocol.md §7)")
    queue_wait: float | None = Field(
        default=None, ge=0, le=bounds.MAX_TIMEOUT,
        description="seconds it may wait its turn for a free slot or an agent (default: "
                    "until its timeout, else the coordinator's max_wait)")
    notify: str | None = Field(
        default=None, max_length=2000, pattern=r"^https?://\S+$",
        description="a URL the task's outcome is POSTed to, signed, when it ends "
                    "(docs/webhooks.md)")
    then: StepName | Steps | None = Field(
        default=None, description="a chain: the capability (or list of steps, each a name or "
        "{\"capability\": name, \"map\": {param: JSON pointer}}) the result is passed to "
        "next, at most 8 (docs/protocol.md, chains)")

    @model_validator(mode="after")
    def _names_the_work(self) -> SubmitBody:
        if self.capability is None and self.intent is None:
            raise ValueError("name a capability, or state an intent")
        return self


class IntentBody(_In):
    """``POST /v1/intent``: a synchronous call routed by what the caller needs."""

    intent: Intent = Field(description="what is needed, in any language")
    params: Params = Field(default_factory=dict)
    timeout: float | None = Field(default=None, gt=0, le=bounds.MAX_TIMEOUT)
    tags: Tags = None
    choose: CapabilityName | None = Field(
        default=None, description="the capability chosen from a refusal's suggestions: it "
        "is called, and the intent routes there next time (docs/intent.md, learned phrases)")


class CallQuery(_In):
    """The query of ``POST /v1/call/{capability}`` (``timeout`` may come as the
    ``X-Reach-Timeout`` header instead)."""

    timeout: float | None = Field(default=None, gt=0, le=bounds.MAX_TIMEOUT,
                                  description="seconds the call may take, retries included")
    priority: int = Field(default=5, ge=0, le=9)
    queue_wait: float | None = Field(
        default=None, ge=0, le=bounds.MAX_TIMEOUT,
        description="seconds the call may wait for a free slot or an agent (default: a "
                    "short queue_wait for a slot, and no wait for an agent)")


class WaitQuery(_In):
    """The query of ``GET /v1/tasks/{task_id}``: ``wait`` long-polls for the outcome."""

    wait: float | None = Field(default=None, ge=0, le=60,
                               description="seconds to wait for the task to finish before "
                                           "answering its status (at most 60)")


class Headers(_In):
    """The request headers the front door reads (all optional)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    caller: Name | None = Field(default=None, min_length=1, max_length=200,
                                alias="X-Reach-Caller")
    idempotency_key: Name | None = Field(default=None, min_length=1, max_length=400,
                                         alias="Idempotency-Key")
    traceparent: bounds.TraceParent | None = Field(default=None)
    timeout: float | None = Field(default=None, gt=0, le=bounds.MAX_TIMEOUT,
                                  alias="X-Reach-Timeout")


# ---------------------------------------------------------------- responses


class CallResult(_Out):
    """A call's answer: the result, and the task that produced it."""

    task_id: str
    trace_id: str
    capability: str
    result: Any = Field(description="what the capability returned (any JSON value)")
    fallback: dict[str, Any] | None = Field(
        default=None, description="set when the result is a fallback, not an agent's answer: "
                                  "kind (value, last_good, capability), reason, age_s, ...")


class TaskAccepted(_Out):
    """A submitted task, committed to the store: the task id is what to ask about next."""

    task_id: str
    trace_id: str
    capability: str
    duplicate: bool = Field(description="true when the Idempotency-Key named an earlier task: "
                                        "this is that task")
    status_url: str
    stream_url: str


class TaskFailure(_Out):
    """How a task failed: Reach's stable code, a message saying what to do next, details."""

    model_config = ConfigDict(extra="allow")
    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class AttemptView(_Out):
    number: int
    agent_id: str
    agent: str
    started_at: float
    ended_at: float | None
    duration_ms: float | None
    outcome: str
    error: str | None
    instance: str | None
    timeout: float | None = None  # the completion timeout it was given, in seconds


class Transition(_Out):
    state: str
    at: float
    note: str


class TaskStatus(_Out):
    """A task as its caller sees it (``Client.status`` over the websocket answers the same)."""

    task_id: str
    trace_id: str
    capability: str
    params: Params
    caller: str
    idempotency_key: str | None
    priority: int
    timeout: float | None
    max_retries: int
    created_at: float
    parent_task_id: str | None
    traceparent: str | None
    state: Literal["pending", "queued", "dispatched", "running", "retrying", "succeeded",
                   "failed", "dead", "cancelled"]
    result: Any = None
    error: TaskFailure | None = None
    attempts: list[AttemptView]
    history: list[Transition]
    updated_at: float
    fallback: dict[str, Any] | None = Field(
        default=None, description="set when the result is a fallback, not an agent's answer: "
                                  "kind (value, last_good, capability), reason, age_s, ...")


class AgentOffer(_Out):
    """One agent serving a capability, as routing sees it now."""

    name: str
    kind: str = Field(description="websocket, http, process, nats, ...")
    state: str = Field(description="online, suspected, offline, draining")
    node: str = Field(description="the coordinator holding the agent's connection: this "
                                  "one's node id, or a peer's (docs/protocol.md §14)")


class CapabilityView(_Out):
    name: str
    params: dict[str, Any] = Field(description="the JSON schema of the params")
    scope: str
    streaming: bool
    idempotent: bool
    latency_ms: float | None = Field(description="the declared typical latency; null: not "
                                                 "declared (docs/protocol.md §8)")
    intents: list[str]
    description: str
    agent_count: int = Field(description="agents declaring it (agents lists at most 100)")
    agents: list[AgentOffer]


class CapabilityList(_Out):
    """The capabilities this caller may call, with who serves each."""

    caller: str
    capabilities: list[CapabilityView]


class Health(_Out):
    status: Literal["ok", "stopping"]
    agents: int = Field(description="agents registered now")
    capabilities: int


class Problem(_Out):
    """An error, as RFC 9457 ``application/problem+json``, carrying Reach's stable ``code``."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(description=f"{PROBLEM_TYPE}<code>")
    title: str
    status: int
    detail: str = Field(description="what went wrong and what to do next")
    code: str = Field(description="Reach's stable error code (docs/http-api.md)")
    details: dict[str, Any] = Field(default_factory=dict)
    task_id: str | None = None
    trace_id: str | None = None
    suggestions: list[str] | None = Field(default=None,
                                          description="no_route: the closest capabilities")
