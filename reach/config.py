"""Every number the coordinator runs by, in one place (field defaults; tests use milliseconds)."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from urllib.parse import urlsplit

from reach.alert_rules import AlertConfig
from reach.core.backoff import Backoff


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 0
    # the REST front door (docs/http-api.md): 0 = a free port, None = no HTTP front door
    http_port: int | None = 0
    store: str = "sqlite://"
    sqlite_synchronous: str = "normal"
    # a cluster (docs/cluster.md): several coordinators on one PostgreSQL store. Each node
    # has an id (node_id; None: one is made at start, host name and random) and a lease in
    # the database it renews; lease_s after its last renewal the others take its tasks over
    cluster: bool = False
    node_id: str | None = None
    lease_s: float = 5.0
    # liveness (heartbeat every 10 s, suspected after 2 missed, offline after 3)
    heartbeat_interval: float = 10.0
    suspect_after: float = 2.0
    offline_after: float = 3.0
    # active probes (reach.core.probes): every probe_interval per agent (an agent may ask for
    # its own, within 1/6..4×); slower than probe_slow twice in a row → suspected; a call
    # that timed out or took over probe_slow_call × its latency_ms makes a probe due at once
    probe_interval: float = 30.0
    probe_slow: float = 5.0
    probe_slow_call: float = 3.0
    # delivery
    ack_timeout: float = 5.0
    queue_wait: float = 0.2  # a synchronous call's wait for a slot (then ``rejected``)
    # The backlog (docs/protocol.md §8): a submitted task waits its turn for a free slot or a
    # routable agent until its deadline, else max_wait from its submit; past max_backlog
    # waiting tasks of a capability the door refuses new submits (``rejected``)
    max_wait: float = 3600.0
    max_backlog: int = 10_000
    max_backlog_age: float | None = None  # or once its longest waiting task waited this long
    priority_aging: float = 50.0  # priority levels gained per second of waiting for a slot
    max_retries: int = 2
    backoff: Backoff = field(default_factory=Backoff)
    breaker_open_for: float = 5.0
    # a capability that declares no latency_ms (docs/protocol.md §8): `default_timeout` until
    # it has `timeout_samples` successes, then its own P95 x 1.5, never below `timeout_floor`
    default_timeout: float = 30.0
    timeout_floor: float = 1.0
    timeout_samples: int = 20
    # last good results kept for `last_good` fallbacks (reach.core.fallback), by count and size
    last_good_entries: int = 10_000
    last_good_bytes: int = 64 << 20
    # retries may add at most this share on top of first attempts (plus a small minimum)
    # over a sliding window: a mass failure must not become a retry storm
    retry_budget: float = 0.2
    retry_budget_min: int = 10
    retry_budget_window: float = 10.0
    auto_replay: bool = False  # replay a capability's dead letters when it gets a healthy agent
    strategy: str = "weighted"
    # a new or recovered agent's share ramps up over this many seconds (a capability's
    # warmup_s overrides it); below priority shed_below a task may fill an agent's slots only
    # up to high_water of them, past that it is shed (docs/architecture.md, "Routing")
    warmup: float = 60.0
    high_water: float = 0.8
    shed_below: int = 5
    # durability and memory
    idempotency_ttl: float = 24 * 3600.0
    recovery_grace: float = 10.0
    recent_tasks: int = 10_000  # finished tasks kept in memory for status and trace
    drain_timeout: float = 5.0
    # wire and security (docs/security.md)
    max_frame_bytes: int = 1 << 20
    tokens: Mapping[str, str] | None = None  # token → principal; None: open mode (loopback)
    permissions: Mapping[str, tuple[str, ...]] | None = None  # caller → capabilities it may call
    serves: Mapping[str, tuple[str, ...]] | None = None  # agent → capabilities it may serve
    insecure: bool = False  # allow a non-loopback bind without tokens
    max_capabilities: int = 256  # per registration (1,000 cost ~25 ms of loop in one step)
    max_schema_bytes: int = 8 * 1024  # one capability's params schema as JSON (~25 ms to compile)
    max_connections: int = 10_000  # open websocket connections, every kind together
    max_pending_per_address: int = 64  # connections from one address not past hello/register
    hello_timeout: float = 10.0  # seconds a new connection has to send its first frame
    # (on the REST port: its first request head; the per-address cap and max_connections
    # apply there too, each port counting its own; docs/security.md "The REST front door")
    http_body_timeout: float = 30.0  # seconds a REST request's body has to arrive in full
    http_idle_timeout: float = 75.0  # seconds a REST connection may idle between requests
    # Host headers the apps mounted on the HTTP port (MCP, A2A) answer (DNS-rebinding
    # protection; "name:*" = any port). None: loopback names and ``host``, any port
    http_allowed_hosts: tuple[str, ...] | None = None
    mcp: bool = False  # serve MCP at /mcp on the HTTP port (docs/mcp.md; extra agent-reach[mcp])
    # route intents with the model fused in (docs/intent.md; extra agent-reach[intent])
    intent_model: bool = False
    a2a: bool = False  # serve A2A at /a2a on the HTTP port (docs/a2a.md; extra agent-reach[a2a])
    a2a_push_private: bool = False  # A2A push notifications may go to private/loopback hosts
    # completion webhooks (docs/webhooks.md): the private, loopback or link-local networks a
    # caller's ``notify`` URL (and an A2A push's) may reach (CIDRs, "10.0.0.0/8"), and the
    # secret a webhook is signed with when its caller gave no token (None: one is made once
    # and kept in the store; Reach.notify_secret reads it)
    notify_allow: Sequence[str] = ()
    notify_secret: str | None = None
    ping_interval: float | None = 20.0  # websocket keepalive; a peer silent past
    ping_timeout: float | None = 20.0  # interval + timeout is closed (None: no pings)
    max_outbox_bytes: int = 16 << 20  # unsent bytes per connection before it is closed (slow)
    max_caller_tasks: int = 10_000  # unfinished tasks one caller may have at once
    recent_bytes: int = 256 << 20  # finished tasks kept for status/trace, by size too
    dead_letters_max: int = 10_000  # unresolved dead letters kept in memory (all stay stored)
    # ... and by size (params, results): the oldest go. Every listed letter, whole, is in the
    # admin feed's snapshot: 32 MiB leaves it room within reach-dash's 64 MiB frame limit.
    dead_letter_bytes: int = 32 << 20
    dead_letter_retention: float = 7 * 24 * 3600.0  # seconds a letter stays listed
    idempotency_keys_max: int = 1_000_000  # keys kept in memory (past it, the oldest go early)
    admin_token: str | None = None  # None: a random one is made at start (reach.admin_token)
    metrics_public: bool = False  # GET /metrics answers loopback peers only unless True
    # observation
    json_logs: bool = False  # one JSON line per task transition and admin action (logger reach)
    recent_traces: int = 200  # traces in the admin feed's snapshot
    # OpenTelemetry (docs/otel.md, pip install 'agent-reach[otel]'): an OTLP/HTTP receiver's
    # URL (http://collector:4318); each finished task is exported there as a span with one
    # child per attempt. None: no export, nothing of OpenTelemetry imported
    otel_endpoint: str | None = None
    otel_service_name: str = "reach"  # the spans' service.name
    # the audit log (docs/security.md): one JSON line per call decision, task end and admin
    # action, appended to this file ("-": only to the logger reach.audit); None: none kept
    audit_log: str | None = None
    audit_params: bool = False  # also record params and intent text (see the risk in the doc)
    # alert rules and webhooks (docs/alerts.md): a rules file's path, or one already loaded
    alerts: str | PathLike[str] | AlertConfig | None = None
    # the cluster's peer links (reach/cluster, docs/protocol.md §14; this node's id is
    # node_id above, outside a cluster a short random one at start): the secret peers prove
    # and never send (None: the admin token), peer URLs linked at start, the agents one peer
    # may announce, and how long changes are coalesced
    peer_token: str | None = None
    peers: Sequence[str] = ()
    max_peer_agents: int = 10_000
    peer_flush: float = 0.05

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "ack_timeout", "max_frame_bytes", "probe_interval",
                     "probe_slow", "probe_slow_call"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not 0 <= self.retry_budget <= 100 or self.retry_budget_min < 0:
            raise ValueError("retry_budget must be in 0..100 and retry_budget_min >= 0")
        if self.default_timeout <= 0 or self.timeout_floor <= 0 or self.timeout_samples < 1:
            raise ValueError("default_timeout and timeout_floor must be positive and "
                             "timeout_samples at least 1")
        if self.max_backlog_age is not None and self.max_backlog_age <= 0:
            raise ValueError("max_backlog_age must be positive (or None: no bound)")
        if self.queue_wait < 0 or self.max_retries < 0:
            raise ValueError("queue_wait and max_retries must not be negative")
        if self.warmup < 0 or not 0 < self.high_water <= 1 or not 0 <= self.shed_below <= 10:
            raise ValueError("need warmup >= 0, high_water in (0, 1] and shed_below in 0..10")
        for name in ("max_capabilities", "max_schema_bytes", "max_connections",
                     "max_pending_per_address", "hello_timeout", "max_outbox_bytes",
                     "max_caller_tasks", "recent_bytes", "dead_letters_max",
                     "dead_letter_bytes", "dead_letter_retention", "idempotency_keys_max",
                     "last_good_entries", "last_good_bytes", "max_peer_agents", "peer_flush",
                     "http_body_timeout", "http_idle_timeout", "max_wait", "max_backlog"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        self._check_store()
        if isinstance(self.notify_allow, str):  # (one network given as a string)
            object.__setattr__(self, "notify_allow", (self.notify_allow,))
        for cidr in self.notify_allow:
            try:
                ipaddress.ip_network(str(cidr).strip(), strict=False)
            except ValueError:
                raise ValueError(f"notify_allow: {cidr!r} is not a network: give CIDRs such "
                                 f"as 127.0.0.0/8 or 10.0.0.0/8") from None
        if self.notify_secret is not None and len(self.notify_secret) < 16:
            raise ValueError("notify_secret must be at least 16 characters")
        if self.otel_endpoint is not None:
            parts = urlsplit(self.otel_endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"otel_endpoint {self.otel_endpoint!r}: give an OTLP/HTTP receiver's URL, "
                    f"like http://127.0.0.1:4318 (the collector's HTTP port, not gRPC's 4317)")
        if self.tokens is None and not self.insecure and not loopback(self.host):
            raise ValueError(
                f"refusing to bind {self.host!r} without tokens: anyone who can reach it could "
                f"register agents and read results. Pass tokens={{token: principal}} "
                f"(reach serve --tokens-file), or insecure=True (--insecure) if the network "
                f"itself is trusted")


    def _check_store(self) -> None:
        postgres = self.store.partition("://")[0].partition("+")[0] in ("postgresql",
                                                                         "postgres")
        if not (self.store.startswith("sqlite:") or postgres):
            raise ValueError(
                f"store {self.store!r} is not supported: use sqlite:///FILE.db (a file, survives "
                f"restarts), sqlite:// (in memory) or postgresql://USER@HOST/DB (several "
                f"coordinators on one database: docs/cluster.md)")
        if self.cluster and not postgres:
            raise ValueError(
                f"a cluster needs a PostgreSQL store (--store postgresql://USER@HOST/DB), not "
                f"{self.store!r}: a SQLite file serves one coordinator")
        if not 0.05 <= self.lease_s <= 3600:
            raise ValueError("lease_s must be between 0.05 and 3600 seconds")
        if self.node_id is not None and not (
                0 < len(self.node_id) <= 128 and self.node_id.isprintable()
                and " " not in self.node_id):
            raise ValueError("node_id must be 1..128 printable characters without spaces")
        if self.cluster and self.peer_token is None and self.admin_token is None:
            raise ValueError(
                "a cluster's nodes link to each other with a shared secret: give every node "
                "the same peer_token (--peer-token-file or REACH_PEER_TOKEN), or the same "
                "admin_token")
        if self.cluster and self.node_id is None:
            object.__setattr__(self, "node_id",
                               f"{socket.gethostname()[:64]}-{os.urandom(4).hex()}")


def loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
