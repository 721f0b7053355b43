"""A fixed, made-up coordinator state and a scripted feed that serves it.

The SVG snapshot tests and the README screenshots (:mod:`dashboard.screenshots`) run the real
app on this state, so every time, id and name is fixed and the pictures are stable.
:class:`ScriptedFeed` is a :class:`~dashboard.feed.FeedConnection` without a socket: frames
are pushed in (as decoded JSON, the coordinator's shape, or as models), decoded with the
feed's models as :class:`~dashboard.feed.AdminFeed` does, and commands are recorded and
answered by a handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from reach.wire import admin

from .feed import AdminRefused, CommandFailed, FeedClosed, FeedConnection, FeedError
from .model import JSON, BadFrame, decode

AT = 1764430000.0
"""The coordinator's clock in the sample: every age in the pictures is measured from here."""


def _agent(name: str, n: int, state: str, *, inflight: int, limit: int, calls: int, faults: int,
           breaker: str, rate: float, probe: float | None, p95: float | None, beat: float,
           caps: list[str], connected: bool = True, draining: bool = False,
           kind: str = "websocket", opened: float | None = None, open_for: float = 5.0,
           node: str = "n-4be1a0") -> JSON:
    held = {} if opened is None else {"opened_at": AT - opened,
                                      "probe_after": AT - opened + open_for,
                                      "tripped_rate": rate, "tripped_calls": 10}
    return {
        "name": name, "agent_id": f"ag-{n:016x}", "state": state, "kind": kind, "node": node,
        "version": "1.2.0",
        "inflight": inflight, "max_concurrency": limit, "load": inflight / limit,
        "queue_depth": 0, "calls": calls, "faults": faults, "capabilities": caps,
        "breaker": breaker,
        "breaker_detail": {"state": breaker, "fault_rate": rate, "window": 10, "window_size": 10,
                           "next_probe_in_s": probe, **held},
        "p95_ms": p95, "since_heartbeat_s": beat, "last_beat": AT - beat,
        "connected": connected, "draining": draining,
    }


AGENTS = [
    _agent("billing", 1, "online", inflight=2, limit=10, calls=812, faults=0, breaker="closed",
           rate=0.0, probe=None, p95=18.2, beat=0.3, caps=["billing.charge", "billing.void"],
           kind="http"),
    _agent("orders-1", 2, "online", inflight=9, limit=10, calls=1204, faults=3,
           breaker="closed", rate=0.1, probe=None, p95=140.0, beat=0.6, caps=["orders.write"]),
    _agent("orders-2", 3, "suspected", inflight=0, limit=10, calls=431, faults=7,
           breaker="open", rate=0.6, probe=3.2, p95=95.5, beat=2.4, caps=["orders.write"],
           opened=1.8, kind="peer", node="n-7c2d19"),
    _agent("reports", 4, "online", inflight=1, limit=4, calls=57, faults=2, breaker="half_open",
           rate=0.5, probe=None, p95=1250.0, beat=0.1, caps=["report.write"], draining=True,
           kind="process", opened=7.5),
    _agent("search", 5, "offline", inflight=0, limit=20, calls=0, faults=0, breaker="closed",
           rate=0.0, probe=None, p95=None, beat=95.0, caps=["data.fetch", "data.search"],
           connected=False),
]


def _trace(n: int, root: str, state: str, started: float, duration: float | None,
           tasks: int, failed: str | None = None, caller: str = "planner") -> JSON:
    return {"trace_id": f"{n:02x}" * 16, "root": root, "caller": caller, "tasks": tasks,
            "started_at": AT - started,
            "ended_at": None if duration is None else AT - started + duration / 1000,
            "duration_ms": duration, "state": state, "failed_capability": failed}


TRACES = [
    _trace(0xA1, "report.write", "failed", 2.0, 800.0, 3, "orders.write"),
    _trace(0xB2, "billing.charge", "running", 3.5, None, 1, caller="checkout"),
    _trace(0xC3, "orders.write", "succeeded", 12.0, 96.0, 1, caller="checkout"),
    _trace(0xD4, "data.fetch", "dead", 75.0, 30010.0, 1, "data.fetch"),
    _trace(0xE5, "billing.refund", "succeeded", 3700.0, 21.0, 1, caller="support"),
]


def _hop(task: str, cap: str, depth: int, phase: str, start: float, end: float,
         agent: str | None = None, attempt: int | None = None, failed: bool = False,
         note: str = "") -> JSON:
    t0 = AT - 2.0
    return {"task_id": task, "capability": cap, "depth": depth, "phase": phase,
            "start": t0 + start, "end": t0 + end, "duration_ms": round((end - start) * 1000, 3),
            "agent": agent, "attempt": attempt, "failed": failed, "note": note}


_ROOT, _CHILD, _FETCH, _CHARGE = "aa" * 16, "bb" * 16, "cc" * 16, "dd" * 16
TIMELINES: dict[str, JSON] = {
    TRACES[0]["trace_id"]: {
        "trace_id": TRACES[0]["trace_id"], "started_at": AT - 2.0, "duration_ms": 800.0,
        "tasks": [
            {"task_id": _ROOT, "parent_task_id": None, "capability": "report.write",
             "caller": "planner", "state": "failed", "depth": 0, "started_at": AT - 2.0,
             "ended_at": AT - 1.2, "error": {"code": "task_failed", "message": "orders down"}},
            {"task_id": _FETCH, "parent_task_id": _ROOT, "capability": "data.fetch",
             "caller": "reports", "state": "succeeded", "depth": 1, "started_at": AT - 1.99,
             "ended_at": AT - 1.9, "error": None},
            {"task_id": _CHILD, "parent_task_id": _ROOT, "capability": "orders.write",
             "caller": "reports", "state": "failed", "depth": 1, "started_at": AT - 1.88,
             "ended_at": AT - 1.22, "error": {"code": "task_failed", "message": "db locked"}},
        ],
        "hops": [
            _hop(_ROOT, "report.write", 0, "queued", 0.0, 0.002),
            _hop(_ROOT, "report.write", 0, "delivered", 0.002, 0.006, "reports", 1),
            _hop(_ROOT, "report.write", 0, "processing", 0.006, 0.79, "reports", 1, True,
                 "task_failed: orders down"),
            _hop(_FETCH, "data.fetch", 1, "queued", 0.01, 0.011),
            _hop(_FETCH, "data.fetch", 1, "processing", 0.011, 0.1, "billing", 1),
            _hop(_FETCH, "data.fetch", 1, "done", 0.1, 0.1, note="succeeded"),
            _hop(_CHILD, "orders.write", 1, "queued", 0.12, 0.121),
            _hop(_CHILD, "orders.write", 1, "processing", 0.121, 0.32, "orders-2", 1, True,
                 "fault: db locked"),
            _hop(_CHILD, "orders.write", 1, "retry", 0.32, 0.52, note="backoff 0.2 s"),
            _hop(_CHILD, "orders.write", 1, "processing", 0.52, 0.78, "orders-1", 2, True,
                 "fault: db locked"),
            _hop(_CHILD, "orders.write", 1, "done", 0.78, 0.78, failed=True, note="failed"),
            _hop(_ROOT, "report.write", 0, "done", 0.8, 0.8, failed=True, note="failed"),
        ],
    },
    TRACES[1]["trace_id"]: {
        "trace_id": TRACES[1]["trace_id"], "started_at": AT - 3.5, "duration_ms": None,
        "tasks": [
            {"task_id": _CHARGE, "parent_task_id": None, "capability": "billing.charge",
             "caller": "checkout", "state": "running", "depth": 0, "started_at": AT - 3.5,
             "ended_at": None, "error": None}],
        "hops": [_hop(_CHARGE, "billing.charge", 0, "queued", -1.5, -1.499),
                 _hop(_CHARGE, "billing.charge", 0, "processing", -1.499, 2.0, "billing-1", 1)],
    },
}


def _attempt(n: int, agent: str, started: float, took: float, outcome: str,
             message: str) -> JSON:
    return {"number": n, "agent_id": f"ag-{0:016x}", "agent": agent, "started_at": started,
            "ended_at": started + took / 1000, "duration_ms": took, "outcome": outcome,
            "error": message}


def _letter(n: int, cap: str, agent: str | None, code: str, message: str, age: float,
            attempts: list[JSON], caller: str = "planner",
            earlier: list[JSON] | None = None) -> JSON:
    task_id = f"{n:02x}" * 16
    return {"task_id": task_id, "capability": cap, "caller": caller, "agent": agent,
            "state": "dead", "error": {"code": code, "message": message}, "attempts": attempts,
            "dead_since": AT - age, "earlier_errors": earlier or [],
            "envelope": {"task_id": task_id, "capability": cap, "params": {"order": n},
                         "caller": caller, "idempotency_key": f"key-{n}", "priority": 5,
                         "max_retries": 2}}


DEAD_LETTERS = [
    _letter(0x11, "data.fetch", "search", "timeout", "no answer within 10.0 s", 75.0,
            [_attempt(1, "search", AT - 105.0, 10000.0, "timeout", "no answer within 10.0 s"),
             _attempt(2, "search", AT - 95.0, 10000.0, "timeout", "no answer within 10.0 s"),
             _attempt(3, "search", AT - 85.0, 10000.0, "timeout", "no answer within 10.0 s")]),
    _letter(0x22, "orders.write", "orders-2", "task_failed", "RuntimeError: db locked", 12.5,
            [_attempt(1, "orders-2", AT - 13.0, 210.0, "fault", "RuntimeError: db locked"),
             _attempt(2, "orders-1", AT - 12.7, 190.0, "fault", "RuntimeError: db locked")],
            caller="checkout"),
    _letter(0x33, "billing.refund", None, "unavailable", "no healthy agent for billing.refund",
            3.0, [], caller="support",  # replayed while no agent could take it
            earlier=[{"at": AT - 3.1, "error": "task_failed: RuntimeError: refunds API 503"}]),
]


def _series(calls: int, faults: int, p50: float | None) -> JSON:
    return {"calls": calls, "succeeded": calls - faults, "answers": 0, "faults": faults,
            "retries": faults // 2, "rejections": 0, "inflight": 0, "p50_ms": p50,
            "p90_ms": None if p50 is None else p50 * 3, "p95_ms": None if p50 is None else p50 * 4,
            "p99_ms": None if p50 is None else p50 * 9}


METRICS = {"capabilities": {"billing.charge": _series(812, 0, 3.1),
                            "orders.write": _series(1635, 10, 21.0),
                            "report.write": _series(57, 2, 310.0),
                            "data.fetch": _series(0, 0, None)},
           "agents": {}, "totals": _series(2504, 12, 4.2),
           "backlog": {"report.write": {"waiting": 14, "oldest_s": 95.0}}}


def snapshot() -> JSON:
    """The sample snapshot frame (a fresh copy each call)."""
    return {"v": 1, "type": "snapshot", "at": AT,
            "coordinator": {"url": "ws://127.0.0.1:8765", "version": "0.1.0",
                            "started_at": AT - 3600.0, "store": "sqlite:///reach.db",
                            "node": "n-4be1a0"},
            "agents": [dict(a) for a in AGENTS], "traces": [dict(t) for t in TRACES],
            "dead_letters": [dict(d) for d in DEAD_LETTERS], "metrics": dict(METRICS)}


PHRASES = [
    {"text": "has the refund for 1182 gone through", "key": "has the refund for 1182 gone through",
     "capability": "refund.status", "learned_at": AT - 5400.0, "caller": "support-bot"},
    {"text": "where is my refund at", "key": "where is my refund at",
     "capability": "refund.status", "learned_at": AT - 3300.0, "caller": "support-bot"},
    {"text": "move 40 units to the north warehouse", "key": "move 40 units to the north warehouse",
     "capability": "stock.transfer", "learned_at": AT - 720.0, "caller": "ops-console"},
]
"""What intent routing learned from choices (the ``phrases`` command; oldest first). English
only: librsvg draws no CJK without a CJK font, and the pictures are checked with it."""


PUSHES = [
    {"task_id": "77" * 16, "config_id": "c0ffee01", "url": "https://hooks.acme.example/a2a/done",
     "reason": "HTTP 404", "dead_at": AT - 1500.0, "capability": "orders.write",
     "caller": "planner", "state": "succeeded"},
    {"task_id": "88" * 16, "config_id": "c0ffee02",
     "url": "https://crm.example.com:8443/push?tenant=7",
     "reason": "ClientConnectorError('Cannot connect to host crm.example.com:8443')",
     "dead_at": AT - 240.0, "capability": "report.write", "caller": "ops-console",
     "state": "failed"},
]
"""The A2A push notifications not delivered (the ``push_dead_letters`` command; oldest
first)."""


def sample_reply(action: str, args: JSON) -> Any:
    """Answers the scripted feed gives: timelines for the sample traces, views for the rest."""
    if action == "trace":
        timeline = TIMELINES.get(args.get("trace_id", ""))
        if timeline is None:
            return {"trace_id": args.get("trace_id"), "started_at": AT, "duration_ms": 0.0,
                    "tasks": [], "hops": []}
        return timeline
    if action == "find":
        return _find(str(args.get("id", "")).lower())
    if action == "replay":
        return {"task_id": args.get("task_id"), "state": "succeeded"}
    if action == "cancel":
        return {"task_id": args.get("task_id"), "state": "cancelled"}
    if action == "discard":
        return next((d for d in DEAD_LETTERS if d["task_id"] == args.get("task_id")), {})
    if action == "replay_filter":
        return {"replayed": [d["task_id"] for d in DEAD_LETTERS]}
    if action == "phrases":
        return {"phrases": [dict(p) for p in PHRASES]}
    if action == "push_dead_letters":
        return {"push_dead_letters": [dict(d) for d in PUSHES]}
    if action == "replay_pushes":
        return {"replayed": [d["task_id"] for d in PUSHES
                             if args.get("task_id") in (None, d["task_id"])]}
    if action == "forget_phrase":
        found = next((p for p in PHRASES if p["text"] == args.get("text")), None)
        return {"forgotten": True, **found} if found else {"forgotten": False,
                                                           "text": args.get("text")}
    if action in ("drain", "undrain", "reset_breaker"):
        return next((a for a in AGENTS if args.get("agent") in (a["name"], a["agent_id"])), {})
    raise CommandFailed("invalid_params", f"unknown action {action!r}")


def _find(ident: str) -> JSON:
    """The ``find`` command on the sample: a trace by (a head of) its id, or a dead letter."""
    for trace in TRACES:
        if trace["trace_id"].startswith(ident):
            return {"trace_id": trace["trace_id"], "task_id": None, "dead_letter": False,
                    "summary": trace, "timeline": sample_reply("trace", trace)}
    for letter in DEAD_LETTERS:
        if letter["task_id"].startswith(ident):
            trace = {"trace_id": "ee" * 16, "root": letter["capability"], "tasks": 1,
                     "started_at": letter["dead_since"], "state": "dead"}
            return {"trace_id": trace["trace_id"], "task_id": letter["task_id"],
                    "dead_letter": True, "summary": trace,
                    "timeline": sample_reply("trace", trace)}
    raise CommandFailed("invalid_params", f"no task or trace id starts with {ident!r}")


Frame = JSON | admin.Snapshot | admin.Delta
"""What a test pushes into a :class:`ScriptedFeed`."""


class ScriptedFeed:
    """A :class:`~dashboard.feed.FeedConnection` fed by the test: :meth:`push` frames in,
    :meth:`drop` the connection, read :attr:`commands` back."""

    def __init__(self, frames: list[Frame] | None = None,
                 reply: Callable[[str, JSON], Any] = sample_reply) -> None:
        self._frames: asyncio.Queue[Frame | FeedError] = asyncio.Queue()
        for frame in frames if frames is not None else [snapshot()]:
            self._frames.put_nowait(frame)
        self.reply = reply
        self.commands: list[tuple[str, JSON]] = []
        self.closed = False

    def push(self, frame: Frame) -> None:
        self._frames.put_nowait(frame)

    def drop(self, error: FeedError | None = None) -> None:
        """The next :meth:`receive` fails, as when the coordinator goes away."""
        self._frames.put_nowait(error or FeedClosed("connection lost"))

    async def receive(self) -> admin.Snapshot | admin.Delta:
        item = await self._frames.get()
        if isinstance(item, FeedError):
            self.closed = True
            raise item
        if not isinstance(item, dict):
            return item
        try:
            return decode(item)
        except BadFrame as exc:  # as the real feed: the connection ends, the app reconnects
            self.closed = True
            raise FeedClosed(f"bad frame from the coordinator: {exc}") from exc

    async def command(self, action: str, args: JSON) -> Any:
        if self.closed:
            raise FeedClosed("connection lost")
        self.commands.append((action, args))
        return self.reply(action, args)

    async def close(self) -> None:
        self.closed = True


def connector(*feeds: ScriptedFeed | FeedError) -> Callable[[str, str], Any]:
    """A connector handing out ``feeds`` in order (an error is raised instead); after the
    last one it keeps failing with :class:`FeedClosed`."""
    queue = list(feeds)

    async def connect(url: str, token: str) -> FeedConnection:
        if not queue:
            raise FeedClosed("no more scripted feeds")
        item = queue.pop(0)
        if isinstance(item, FeedError):
            raise item
        return item

    return connect


__all__ = ["AT", "AdminRefused", "ScriptedFeed", "connector", "sample_reply", "snapshot"]
