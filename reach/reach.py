"""``Reach``: one coordinator — store, registry, router, gateway and websocket channel, wired.

    reach = await Reach.start()                     # in-memory SQLite, 127.0.0.1, free port
    async with Reach.start(store="sqlite:///reach.db") as reach: ...

Nothing here blocks the event loop or calls ``asyncio.run``, so it works under top-level
``await`` in Jupyter. Two instances in one process share nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
import time
from collections.abc import Callable, Generator
from dataclasses import fields
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from reach.config import Settings, loopback
from reach.gateway.clock import LoopClock
from reach.ports import Clock
from reach.core import names, traces
from reach.core.liveness import LivenessPolicy
from reach.core.registry import AgentRecord, Registry
from reach.core.routing import Router
from reach.core.tasks import Task, TaskState
from reach.core.trust import Trust
from reach.errors import InvalidParams
from reach.gateway.events import ADMIN, AGENT, Event
from reach.gateway.gateway import Gateway
from reach.server.channel import Channel, new_agent_id
from reach.server.display import AgentList, TraceView, reach_html
from reach.server.prom import CONTENT_TYPE_LATEST, Exporter
from reach.store.store import Store
from reach.wire.protocol import Register

log = logging.getLogger("reach")
events_log = logging.getLogger("reach.events")
_SETTING_NAMES = frozenset(f.name for f in fields(Settings))


class _Starting:
    """What ``Reach.start(...)`` returns: await it, or use it with ``async with``."""

    def __init__(self, reach: Reach) -> None:
        self._reach = reach

    def __await__(self) -> Generator[Any, None, Reach]:
        return self._start().__await__()

    async def _start(self) -> Reach:
        await self._reach._open()
        return self._reach

    async def __aenter__(self) -> Reach:
        return await self._start()

    async def __aexit__(self, *exc: object) -> None:
        await self._reach.stop()


class Reach:
    """The coordinator. Create it with ``await Reach.start(...)``; every timing is an argument."""

    def __init__(self, settings: Settings | None = None, *,
                 clock: Callable[[], float] | Clock = time.time, seed: int | None = None) -> None:
        self.settings = settings or Settings()
        # One time base for every part: a wall-time function (as before) or a whole Clock.
        self.clock: Clock = LoopClock(clock) if callable(clock) else clock
        s = self.settings
        self.store = Store(s.store, s.sqlite_synchronous)
        self.registry = Registry(
            LivenessPolicy(s.heartbeat_interval, s.suspect_after, s.offline_after),
            breaker_open_for=s.breaker_open_for, max_schema_bytes=s.max_schema_bytes)
        rng = random.Random(seed)
        self.trust = Trust.of(s.tokens, s.permissions, s.serves)
        self.router = Router(strategy=s.strategy, rng=rng, permissions=self.trust.calls)
        self.gateway = Gateway(s, self.registry, self.router, self.store, self.clock, rng)
        self.channel = Channel(self)
        self.events = self.gateway.events
        # Without a configured token the admin feed still needs one: a random one, readable
        # here and printed by `reach serve`, so an open port never means an open admin feed.
        self.admin_token: str = s.admin_token or secrets.token_urlsafe(18)
        self.registry.listen(self._agent_changed)
        self._exporter = Exporter(self)
        self._auto_replayed: set[str] = set()
        self.started_at = 0.0
        if s.json_logs:
            self.events.listen(_log_json)
        self._identities: dict[str, str] = {}
        self._server: Server | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._port = s.port
        self.started = False

    @classmethod
    def start(cls, settings: Settings | None = None, *,
              clock: Callable[[], float] | Clock = time.time,
              seed: int | None = None, **options: Any) -> _Starting:
        """Start a coordinator. Options are ``Settings`` fields (``store``, ``port``,
        ``heartbeat_interval``, ``suspect_after``, ``offline_after``, ``ack_timeout``, ...)."""
        unknown = set(options) - _SETTING_NAMES
        if unknown:
            raise TypeError(f"unknown Reach option(s): {sorted(unknown)}; "
                            f"see reach.Settings for the full list")
        if settings is None:
            settings = Settings(**options)
        elif options:
            raise TypeError("pass either a Settings object or keyword options, not both")
        return _Starting(cls(settings, clock=clock, seed=seed))

    # ------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        if self.started:
            return
        try:
            await self._open_parts()
        except BaseException:
            for loop_task in self._loops:
                loop_task.cancel()
            await asyncio.gather(*self._loops, return_exceptions=True)
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
            await self.store.close()
            raise

    async def _open_parts(self) -> None:
        s = self.settings
        await self.store.open()
        self._identities = await self.store.agent_ids()
        for name, caps in (await self.store.declared()).items():
            for cap in caps:
                try:
                    self.gateway.known.setdefault(names.normalize(cap), set()).add(name)
                except ValueError:
                    continue
        now = self.clock.wall()
        for task in await self.store.dead(s.dead_letters_max, now - s.dead_letter_retention):
            self.gateway.dead[task.task_id] = task
        for key, task_id, created in await self.store.keys_since(
                now - s.idempotency_ttl, s.idempotency_keys_max):
            self.gateway.remember_key(key, task_id, created)
        # Unfinished tasks are live again before anyone can connect and ask about them.
        unfinished = await self.store.unfinished()
        for task in unfinished:
            self.gateway.resume(task)
        if unfinished:
            log.info("resumed %d unfinished task(s) from %s", len(unfinished), s.store)
        self._server = await serve(self.channel.handle, s.host, s.port,
                                   max_size=s.max_frame_bytes, compression=None,
                                   ping_interval=s.ping_interval, ping_timeout=s.ping_timeout,
                                   open_timeout=s.hello_timeout, close_timeout=1.0,
                                   process_request=self._http,
                                   logger=Throttled(logging.getLogger("websockets.server")))
        self._port = self._server.sockets[0].getsockname()[1] if self._server.sockets else s.port
        loop = asyncio.get_running_loop()
        self._loops.append(loop.create_task(self._sweep_loop(), name="reach-liveness"))
        self._loops.append(loop.create_task(self.channel.watch_lag(), name="reach-lag"))
        self.started_at = self.clock.wall()
        self.started = True
        for warning in self.trust_warnings():
            log.warning("%s", warning)

    def trust_warnings(self) -> list[str]:
        """What an operator must know about how open this coordinator is (said at start)."""
        s, out = self.settings, []
        if self.trust.open:
            out.append(f"open mode: no tokens, so any process that reaches {self.url} may "
                       f"register agents and call capabilities under any name"
                       + ("" if not s.insecure else
                          " — and it is bound beyond loopback (insecure=True)")
                       + "; configure tokens (docs/security.md)")
        elif s.serves is None:
            out.append("tokens without serve rules: every token holder may register as an "
                       "agent and serve any capability; pass serves={agent: patterns}")
        return out

    async def stop(self) -> None:
        """Stop gracefully: refuse new work, drain running tasks, close sockets, flush the store."""
        if not self.started:
            return
        self.started = False
        self.gateway.accepting = False
        for loop_task in self._loops:
            loop_task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self.gateway.stop(self.settings.drain_timeout)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.store.close()

    async def __aenter__(self) -> Reach:
        await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"ws://{self.settings.host}:{self._port}"

    @property
    def port(self) -> int:
        return int(self._port)

    async def _sweep_loop(self) -> None:
        period = max(0.005, min(1.0, self.settings.heartbeat_interval / 4))
        next_prune = 0.0
        while True:
            await asyncio.sleep(period)
            now = self.clock.wall()
            self.registry.sweep(now)  # changes reach the gateway as registry events
            if now >= next_prune:
                self.gateway.prune_keys(now - self.settings.idempotency_ttl)
                self.gateway.prune_dead(now - self.settings.dead_letter_retention)
                next_prune = now + 60.0

    # ------------------------------------------------------------ identities (channel calls)

    def identity(self, name: str) -> str:
        """The agent id for ``name``: the same one across reconnects and restarts."""
        record = self.registry.by_name.get(name)
        if record is not None:
            return record.agent_id
        agent_id = self._identities.get(name)
        if agent_id is None:
            agent_id = self._identities[name] = new_agent_id()
        return agent_id

    async def remember_agent(self, record: AgentRecord, reg: Register) -> None:
        for cap in record.capabilities:
            self.gateway.known.setdefault(cap, set()).add(record.name)
        await self.store.save_agent(
            record.agent_id, record.name, record.version,
            [c.model_dump() for c in reg.capabilities], record.max_concurrency, self.clock.wall())

    # ------------------------------------------------------------ plain HTTP on the same port

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        """``GET /metrics`` (Prometheus text format); anything else goes on to the websocket
        handshake. Metrics answer loopback peers only unless ``metrics_public``."""
        if request.path.split("?", 1)[0] != "/metrics":
            if self.channel.full:  # refused before the upgrade: no session is built for it
                return connection.respond(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    "the coordinator is at its connection limit (max_connections); retry "
                    "later or on another coordinator\n")
            return None
        peer = str(connection.remote_address[0]) if connection.remote_address else ""
        if not self.settings.metrics_public and not loopback(peer):
            return connection.respond(
                HTTPStatus.FORBIDDEN,
                "/metrics answers loopback peers only; start with metrics_public=True\n")
        response = connection.respond(HTTPStatus.OK, "")
        body = self._exporter.render()
        response.body = body
        del response.headers["Content-Type"]
        del response.headers["Content-Length"]
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        response.headers["Content-Length"] = str(len(body))
        return response

    # ------------------------------------------------------------ events

    def _agent_changed(self, record: AgentRecord) -> None:
        self.events.publish(AGENT, {"agent": record.name, "agent_id": record.agent_id,
                                    "state": record.state.value})
        if self.settings.auto_replay and record.reachable:
            self._auto_replay(record)

    def _auto_replay(self, record: AgentRecord) -> None:
        """A capability got a healthy agent: replay its dead letters, each at most once."""
        for task in list(self.gateway.dead.values()):
            if (task.state is TaskState.DEAD and task.envelope.capability in record.capabilities
                    and task.task_id not in self._auto_replayed):
                self._auto_replayed.add(task.task_id)
                self.gateway.replay(task)

    def admin_action(self, action: str, args: dict[str, Any], ok: bool) -> None:
        """Record an operator's action as an event (and a JSON log line when enabled)."""
        self.events.publish(ADMIN, {"action": action, "args": args, "ok": ok})

    # ------------------------------------------------------------ admin surface

    def describe(self) -> dict[str, Any]:
        from reach import __version__
        return {"url": self.url, "version": __version__, "started_at": self.started_at,
                "store": self.settings.store}

    def agents(self, *, names: set[str] | None = None) -> AgentList:
        """Every known agent (or those named): state, load, capabilities, breaker, P95, ..."""
        now = self.clock.wall()
        records = self.registry.by_id.values() if names is None else [
            r for n in names if (r := self.registry.by_name.get(n)) is not None]
        return AgentList(self._view(r, now) for r in sorted(records, key=lambda r: r.name))

    def _view(self, record: AgentRecord, now: float) -> dict[str, Any]:
        return record.view(now, self.gateway.metrics.p95_ms(record.name))

    def _agent(self, ref: str) -> AgentRecord:
        record = self.registry.by_name.get(ref) or self.registry.by_id.get(ref)
        if record is None:
            raise InvalidParams(f"no agent named {ref!r}; see reach.agents()")
        return record

    def drain(self, agent: str) -> dict[str, Any]:
        """Stop routing new work to ``agent`` (name or id); its in-flight work finishes."""
        record = self._agent(agent)
        self.registry.deregister(record, self.clock.wall())
        return self._view(record, self.clock.wall())

    def undrain(self, agent: str) -> dict[str, Any]:
        """Route work to a drained agent again."""
        record = self._agent(agent)
        self.registry.undrain(record, self.clock.wall())
        return self._view(record, self.clock.wall())

    def reset_breaker(self, agent: str) -> dict[str, Any]:
        """Close ``agent``'s breaker and forget its window (after a fix, without waiting)."""
        record = self._agent(agent)
        before = record.breaker.state
        record.breaker.reset()
        self.gateway.breaker_moved(record, before)
        return self._view(record, self.clock.wall())

    def metrics(self) -> dict[str, Any]:
        """Calls, faults, answers, retries, rejections, in-flight and latency percentiles, per
        capability, per agent and in total (docs/admin-feed.md, "Metrics")."""
        return self.gateway.metrics.snapshot()

    def dead_letters(self, *, capability: str | None = None, agent: str | None = None,
                     error: str | None = None, since: float | None = None,
                     until: float | None = None) -> list[dict[str, Any]]:
        """Unresolved dead letters (envelope, error, attempts), oldest first; a letter being
        replayed stays listed (its ``state`` says so) until the replay succeeds. Filters: the
        capability, an agent that made an attempt, a substring of the error (any case), and
        the time it became a dead letter."""
        return [_letter(t) for t in self._letters(capability, agent, error, since, until)]

    def dead_letter(self, task_id: str) -> dict[str, Any] | None:
        task = self.gateway.dead.get(task_id)
        return None if task is None else _letter(task)

    def _letters(self, capability: str | None, agent: str | None, error: str | None,
                 since: float | None, until: float | None) -> list[Task]:
        needle = None if error is None else error.lower()
        out = []
        for task in sorted(self.gateway.dead.values(), key=lambda t: t.envelope.created_at):
            if capability is not None and task.envelope.capability != capability:
                continue
            if agent is not None and not any(agent in (a.agent, a.agent_id)
                                             for a in task.attempts):
                continue
            if needle is not None and needle not in json.dumps(task.error).lower():
                continue
            if since is not None and task.updated_at < since:
                continue
            if until is not None and task.updated_at > until:
                continue
            out.append(task)
        return out

    async def replay(self, task_id: str, *, wait: float | None = None) -> dict[str, Any]:
        """Run a dead letter again; returns its view once it ends (or after ``wait`` s). A
        letter past the retention (or the in-memory cap) is found in the store."""
        task = self.gateway.dead.get(task_id)
        if task is None:
            task = await self.gateway.task(task_id)
        if task is None or task.state is not TaskState.DEAD:
            raise InvalidParams(f"{task_id!r} is not an unresolved dead letter; "
                                f"see reach.dead_letters()")
        self.gateway.replay(task)
        fut = self.gateway.outcome(task_id)
        if fut is not None:
            try:
                async with asyncio.timeout(wait):
                    await asyncio.shield(fut)
            except TimeoutError:
                pass
        return task.view()

    def replay_many(self, *, capability: str | None = None, agent: str | None = None,
                    error: str | None = None, since: float | None = None,
                    until: float | None = None) -> list[str]:
        """Replay every dead letter matching the filter (as ``dead_letters``); returns their
        task ids at once. Each is a tracked task: follow it with ``task()`` or ``trace()``."""
        letters = [t for t in self._letters(capability, agent, error, since, until)
                   if t.state is TaskState.DEAD]  # not those being replayed already
        for task in letters:
            self.gateway.replay(task)
        return [t.task_id for t in letters]

    def traces(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Summaries of the most recent traces, newest first."""
        limit = self.settings.recent_traces if limit is None else limit
        ids = list(self.gateway.traces)[-limit:] if limit > 0 else []
        return [self.trace_summary(t) for t in reversed(ids)]

    def _trace_tasks(self, trace_id: str) -> list[Task]:
        return [t for tid in self.gateway.traces.get(trace_id, ())
                if (t := self.gateway.find(tid)) is not None]

    def trace_summary(self, trace_id: str) -> dict[str, Any]:
        return traces.summary(trace_id, self._trace_tasks(trace_id))

    def trace(self, trace_id: str) -> TraceView:
        """The ordered events of one call chain (every task's transitions, with times); the
        result also carries ``.hops`` (per-hop timings: queued, delivered, processing, retry,
        done), ``.tasks`` and ``.summary``, and renders as a timeline in a notebook."""
        tasks = self._trace_tasks(trace_id)
        events: list[dict[str, Any]] = []
        for task in tasks:
            events.extend(_events(task))
        events.sort(key=lambda e: e["at"])
        return TraceView(events, traces.timeline(trace_id, tasks))

    async def task(self, task_id: str) -> dict[str, Any] | None:
        """A task's full view, from memory or the store."""
        task = await self.gateway.task(task_id)
        return None if task is None else task.view()

    async def admin_command(self, action: str, args: dict[str, Any]) -> Any:
        """Run one admin-feed command (docs/admin-feed.md, "Commands")."""
        if action == "replay":
            return await self.replay(str(args["task_id"]), wait=float(args.get("wait", 30.0)))
        if action == "replay_filter":
            allowed = {"capability", "agent", "error", "since", "until"}
            unknown = set(args) - allowed
            if unknown:
                raise InvalidParams(f"unknown filter(s) {sorted(unknown)}; use {sorted(allowed)}")
            return {"replayed": self.replay_many(**args)}
        if action in ("drain", "undrain", "reset_breaker"):
            return getattr(self, action)(str(args["agent"]))
        if action == "trace":
            return self.trace(str(args["trace_id"])).timeline
        raise InvalidParams(f"unknown admin action {action!r}; see docs/admin-feed.md")

    def _repr_html_(self) -> str:
        return reach_html(self)


class Throttled(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The websockets server's logger, saying each distinct message at most once a second: at
    the file-descriptor limit, failed handshakes would otherwise fill the log at MB/s."""

    def __init__(self, logger: logging.Logger, every: float = 1.0) -> None:
        super().__init__(logger, {})
        self.every = every
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        key, now = str(msg), time.monotonic()
        if now - self._last.get(key, -self.every) < self.every:
            self._quiet[key] = self._quiet.get(key, 0) + 1
            return
        if len(self._last) > 1000:
            self._last.clear()
        self._last[key] = now
        quiet = self._quiet.pop(key, 0)
        if quiet:
            msg = f"{msg} (and {quiet} more like it in the last {self.every:.0f}s)"
        super().log(level, msg, *args, **kwargs)


def _log_json(event: Event) -> None:
    """One JSON line per task transition, agent or breaker change and admin action."""
    if events_log.isEnabledFor(logging.INFO):
        events_log.info(json.dumps({"event": event.kind, "timestamp": event.at, **event.data},
                                   default=str, ensure_ascii=False))


def _letter(task: Task) -> dict[str, Any]:
    env = task.envelope
    return {"task_id": task.task_id, "capability": env.capability, "caller": env.caller,
            "agent": task.attempts[-1].agent if task.attempts else None,
            "state": task.state.value, "envelope": env.to_dict(), "error": task.error,
            "attempts": [a.to_dict() for a in task.attempts], "dead_since": task.updated_at}


def _events(task: Task) -> list[dict[str, Any]]:
    env = task.envelope
    return [{"task_id": env.task_id, "parent_task_id": env.parent_task_id,
             "capability": env.capability, "caller": env.caller, "state": state, "at": at,
             "note": note} for state, at, note in task.history]
