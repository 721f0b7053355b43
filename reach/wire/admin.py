"""The admin feed's frames and objects (docs/admin-feed.md), as models an operator's tool reads.

    reach → admin: snapshot, delta, reply, error        admin → reach: admin, command

The opening and command frames (``AdminHello``, ``Command``) are in reach.wire.protocol with
the other frames a peer sends. The objects a snapshot carries — ``AgentView``,
``TraceSummary``, ``DeadLetter``, ``Metrics``, and the ``Timeline`` a ``trace`` command
returns — are typed here once, so a dashboard reads them with ``parse_admin`` instead of
re-typing their fields by hand. They ignore fields they do not know (a newer coordinator may
add some) and, like every frame, carry ``v``.

The coordinator builds these frames from views it made itself (``unchecked``) and sends them
with ``dump_admin``: values stay as given, so a ``null`` the document promises (``p95_ms``
before any call, ``ended_at`` of a running trace) is sent as ``null``, never left out.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import to_json

from reach.errors import ProtocolError
from reach.wire.protocol import Error, Frame, WireError


class _Object(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BreakerDetail(_Object):
    state: str
    fault_rate: float
    window: int
    window_size: int
    next_probe_in_s: float | None = None
    # Set while the breaker is not closed (absent from older coordinators).
    opened_at: float | None = None
    probe_after: float | None = None
    tripped_rate: float | None = None
    tripped_calls: int | None = None
    probe_failed: bool = False


class ProbeView(_Object):
    """An agent's active probes (reach.core.probes): its interval and its last answer."""

    interval_s: float
    last_ms: float | None = None  # null: none answered yet, or the last went unanswered
    last_ok: bool | None = None
    ago_s: float | None = None
    slow_streak: int = 0
    sent: int = 0
    slow: int = 0
    unanswered: int = 0


class AgentView(_Object):
    name: str
    agent_id: str
    state: str  # online | suspected | offline | drained (``draining``: no new work)
    kind: str = "websocket"  # what carries its work: websocket | http | process | nats | peer
    node: str | None = None  # the coordinator holding the agent's connection (reach.cluster)
    version: str = "0"
    inflight: int = 0
    max_concurrency: int = 1
    load: float = 0.0
    queue_depth: int = 0
    calls: int = 0
    faults: int = 0
    capabilities: list[str] = Field(default_factory=list)
    breaker: str = "closed"  # closed | open | half_open
    breaker_detail: BreakerDetail | None = None
    p95_ms: float | None = None
    since_heartbeat_s: float = 0.0
    last_beat: float = 0.0
    connected: bool = False
    draining: bool = False
    # who stopped its new work while draining: operator | agent (agent.close()) | detach |
    # holder (its node, for a peer's agent); null when not draining (or an older coordinator)
    drained_by: str | None = None
    # why a suspected agent is: probe | heartbeat | disconnected | draining (null otherwise)
    suspected_by: str | None = None
    heartbeat_interval_s: float | None = None  # its own (docs/protocol.md §3)
    probe: ProbeView | None = None  # null: not probed (it did not say probes: true)
    warming: bool = False  # in a warm-up: its share of new work is still ramping up
    warm_share: float = 1.0  # how far (0.1 … 1), the least warm of its capabilities
    success_7d: float | None = None  # judged calls that succeeded over 7 days (None: none)
    calls_7d: int = 0


class TraceSummary(_Object):
    trace_id: str
    root: str | None = None
    caller: str | None = None
    tasks: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    duration_ms: float | None = None
    state: str = "running"  # dead > failed > running > succeeded
    failed_capability: str | None = None


class AttemptView(_Object):
    number: int
    agent_id: str | None = None
    agent: str | None = None
    started_at: float
    ended_at: float | None = None
    duration_ms: float | None = None
    outcome: str  # ok | answer | fault | timeout | lost | undelivered | cancelled | running
    error: str | None = None


class EarlierError(_Object):
    """An error a dead letter had before a replay replaced it (oldest first)."""

    at: float
    error: str


class DeadLetter(_Object):
    task_id: str
    capability: str
    caller: str
    agent: str | None = None
    state: str = "dead"
    error: dict[str, Any] | None = None
    attempts: list[AttemptView] = Field(default_factory=list)
    dead_since: float
    envelope: dict[str, Any] = Field(default_factory=dict)
    earlier_errors: list[EarlierError] = Field(default_factory=list)
    # a discarded letter's {"reason", "by", "at"} (reach.settling; absent from older ones)
    discarded: dict[str, Any] | None = None


class Phrase(_Object):
    """One phrase intent routing learned from a caller's choice (the ``phrases`` command;
    docs/intent.md): the request as written, its match key, the capability chosen, when
    (epoch seconds) and who taught it."""

    text: str
    key: str = ""
    capability: str
    learned_at: float = 0.0
    caller: str = ""


class Series(_Object):
    calls: int = 0
    succeeded: int = 0
    answers: int = 0
    faults: int = 0
    retries: int = 0
    rejections: int = 0
    fallbacks: int = 0
    inflight: int = 0
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None


class ClusterMetrics(_Object):
    """A cluster's counters: every node's summed, in total and per capability, and each
    node's own totals (percentiles stay per node)."""

    totals: Series = Field(default_factory=Series)
    capabilities: dict[str, Series] = Field(default_factory=dict)
    nodes: dict[str, Series] = Field(default_factory=dict)


class Backlog(_Object):
    """One capability's tasks waiting their turn (a free slot or an agent)."""

    waiting: int = 0
    oldest_s: float = 0.0  # the oldest one's age since its submit


class Metrics(_Object):
    capabilities: dict[str, Series] = Field(default_factory=dict)
    agents: dict[str, Series] = Field(default_factory=dict)
    totals: Series = Field(default_factory=Series)
    backlog: dict[str, Backlog] = Field(default_factory=dict)
    cluster: ClusterMetrics | None = None  # a cluster's node only


class TimelineTask(_Object):
    task_id: str
    parent_task_id: str | None = None
    capability: str
    caller: str
    state: str
    depth: int = 0
    started_at: float
    ended_at: float | None = None
    error: dict[str, Any] | None = None


class Hop(_Object):
    task_id: str
    capability: str
    depth: int = 0
    phase: str  # queued | delivered | processing | retry | done
    start: float
    end: float | None = None
    duration_ms: float | None = None
    agent: str | None = None
    attempt: int | None = None
    failed: bool = False
    note: str = ""


class Timeline(_Object):
    trace_id: str
    started_at: float | None = None
    duration_ms: float | None = None
    tasks: list[TimelineTask] = Field(default_factory=list)
    hops: list[Hop] = Field(default_factory=list)


class WeightOverride(_Object):
    """An operator's weight for an agent (``capability`` null: all it serves)."""

    agent: str
    capability: str | None = None
    weight: float


class Overrides(_Object):
    """An operator's hand on routing (docs/admin-feed.md, ``set_weight``/``pin``/``unpin``)."""

    weights: list[WeightOverride] = Field(default_factory=list)
    pins: dict[str, list[str]] = Field(default_factory=dict)  # capability → pinned agents


class AlertView(_Object):
    """An alert firing now (docs/alerts.md): which rule, about what, since when."""

    id: str
    rule: str
    kind: str  # dead_letters | breaker_open | p95_latency | no_agent
    state: str = "firing"
    capability: str | None = None
    agent: str | None = None
    value: float = 0.0
    threshold: float = 0.0
    unit: str = ""
    since: float = 0.0
    fired_at: float = 0.0
    resolved_at: float | None = None
    summary: str = ""


class Coordinator(_Object):
    url: str
    version: str
    started_at: float
    store: str
    node: str | None = None  # this coordinator's node id (reach.cluster)


# ---------------------------------------------------------------- frames (reach → admin)

class Snapshot(Frame):
    """The whole picture: sent first, and again in place of a delta a reader fell behind on."""

    type: Literal["snapshot"] = "snapshot"
    at: float
    coordinator: Coordinator
    agents: list[AgentView] = Field(default_factory=list)
    traces: list[TraceSummary] = Field(default_factory=list)
    dead_letters: list[DeadLetter] = Field(default_factory=list)
    metrics: Metrics = Field(default_factory=Metrics)
    alerts: list[AlertView] = Field(default_factory=list)  # firing now (docs/alerts.md)
    overrides: Overrides = Field(default_factory=Overrides)  # weights and pins by hand


class Delta(Frame):
    """What changed since the last frame (see docs/admin-feed.md, "Apply a delta")."""

    type: Literal["delta"] = "delta"
    at: float
    agents: list[AgentView] = Field(default_factory=list)
    traces: list[TraceSummary] = Field(default_factory=list)
    dead_letters: list[DeadLetter] = Field(default_factory=list)
    resolved: list[str] = Field(default_factory=list)
    metrics: Metrics = Field(default_factory=Metrics)
    dropped: int = 0
    alerts: list[AlertView] = Field(default_factory=list)  # every alert firing now
    overrides: Overrides = Field(default_factory=Overrides)  # all of them, as now


class Reply(Frame):
    """The answer to the ``command`` of the same ``id``: ``result`` if ``ok``, else ``error``."""

    type: Literal["reply"] = "reply"
    id: int
    ok: bool
    result: Any = None
    error: WireError | None = None


AdminFrame = Annotated[Snapshot | Delta | Reply | Error, Field(discriminator="type")]
_ADMIN: TypeAdapter[Any] = TypeAdapter(AdminFrame)
ADMIN_FRAME_TYPES = frozenset(("snapshot", "delta", "reply", "error"))


def parse_admin(raw: str | bytes) -> Snapshot | Delta | Reply | Error:
    """Decode one frame the coordinator sends on the admin feed; ``ProtocolError`` if it is not
    one (for a reader: the coordinator is trusted, so this says what, not why at length)."""
    try:
        frame: Snapshot | Delta | Reply | Error = _ADMIN.validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))[:200] or "frame"
        raise ProtocolError(f"invalid admin-feed frame: {where}: {first.get('msg')}") from None
    return frame


def dump_admin(frame: Snapshot | Delta | Reply) -> str:
    """Encode an admin-feed frame the coordinator built from its own views (``unchecked``, with
    plain dicts where the models say AgentView, DeadLetter, ...). Top-level None fields are
    left out as ``dump`` does; inside, every value is written as given, a None included."""
    # Through pydantic-core's inference rather than the model's serializer, which would warn
    # on every dict standing in for a model; a model among the values is written as itself.
    return to_json({k: v for k, v in frame.__dict__.items() if v is not None}).decode()
