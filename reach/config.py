"""Every number the coordinator runs by, in one place (field defaults; tests use milliseconds)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .resilience import Backoff


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 0
    store: str = "sqlite://"
    sqlite_synchronous: str = "normal"
    # liveness (heartbeat every 10 s, suspected after 2 missed, offline after 3)
    heartbeat_interval: float = 10.0
    suspect_after: float = 2.0
    offline_after: float = 3.0
    # delivery
    ack_timeout: float = 5.0
    queue_wait: float = 0.2
    priority_aging: float = 50.0  # priority levels gained per second of waiting for a slot
    max_retries: int = 2
    backoff: Backoff = field(default_factory=Backoff)
    breaker_open_for: float = 5.0
    # retries may add at most this share on top of first attempts (plus a small minimum)
    # over a sliding window: a mass failure must not become a retry storm
    retry_budget: float = 0.2
    retry_budget_min: int = 10
    retry_budget_window: float = 10.0
    auto_replay: bool = False  # replay a capability's dead letters when it gets a healthy agent
    strategy: str = "weighted"
    # durability and memory
    idempotency_ttl: float = 24 * 3600.0
    recovery_grace: float = 10.0
    recent_tasks: int = 10_000  # finished tasks kept in memory for status and trace
    drain_timeout: float = 5.0
    # wire and security
    max_frame_bytes: int = 1 << 20
    tokens: Mapping[str, str] | None = None
    permissions: Mapping[str, tuple[str, ...]] | None = None
    admin_token: str | None = None  # None: a random one is made at start (reach.admin_token)
    metrics_public: bool = False  # GET /metrics answers loopback peers only unless True
    # observation
    json_logs: bool = False  # one JSON line per task transition and admin action (logger reach)
    recent_traces: int = 200  # traces in the admin feed's snapshot

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "ack_timeout", "max_frame_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not 0 <= self.retry_budget <= 100 or self.retry_budget_min < 0:
            raise ValueError("retry_budget must be in 0..100 and retry_budget_min >= 0")
        if self.queue_wait < 0 or self.max_retries < 0:
            raise ValueError("queue_wait and max_retries must not be negative")
