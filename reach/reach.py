"""``Reach``: one coordinator — store, registry, router, gateway and websocket channel, wired.

    reach = await Reach.start()                     # in-memory SQLite, 127.0.0.1, free port
    async with Reach.start(store="sqlite:///reach.db") as reach: ...

Nothing here blocks the event loop or calls ``asyncio.run``, so it works under top-level
``await`` in Jupyter. Two instances in one process share nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Generator
from dataclasses import fields
from typing import Any

from websockets.asyncio.server import Server, serve

from . import names
from .channel import Channel, new_agent_id
from .config import Settings
from .errors import ReachError
from .gateway import Gateway
from .liveness import LivenessPolicy
from .protocol import Register
from .registry import AgentRecord, Registry
from .routing import Permissions, Router
from .store import Store
from .tasks import Task, TaskState

log = logging.getLogger("reach")
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
                 clock: Callable[[], float] = time.time, seed: int | None = None) -> None:
        self.settings = settings or Settings()
        self.clock = clock
        s = self.settings
        self.store = Store(s.store, s.sqlite_synchronous)
        self.registry = Registry(
            LivenessPolicy(s.heartbeat_interval, s.suspect_after, s.offline_after),
            breaker_open_for=s.breaker_open_for)
        rng = random.Random(seed)
        self.router = Router(
            strategy=s.strategy, rng=rng,
            permissions=Permissions(None if s.permissions is None else
                                    {k: tuple(v) for k, v in s.permissions.items()}))
        self.gateway = Gateway(s, self.registry, self.router, self.store, clock, rng)
        self.channel = Channel(self)
        self._identities: dict[str, str] = {}
        self._server: Server | None = None
        self._loops: list[asyncio.Task[None]] = []
        self._port = s.port
        self.started = False

    @classmethod
    def start(cls, settings: Settings | None = None, *, clock: Callable[[], float] = time.time,
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
        for task in await self.store.dead():
            self.gateway.dead[task.task_id] = task
        for key, task_id, created in await self.store.keys_since(self.clock() - s.idempotency_ttl):
            self.gateway.remember_key(key, task_id, created)
        # Unfinished tasks are live again before anyone can connect and ask about them.
        unfinished = await self.store.unfinished()
        for task in unfinished:
            self.gateway.resume(task)
        if unfinished:
            log.info("resumed %d unfinished task(s) from %s", len(unfinished), s.store)
        self._server = await serve(self.channel.handle, s.host, s.port,
                                   max_size=s.max_frame_bytes, compression=None,
                                   ping_interval=None, close_timeout=1.0)
        self._port = self._server.sockets[0].getsockname()[1] if self._server.sockets else s.port
        loop = asyncio.get_running_loop()
        self._loops.append(loop.create_task(self._sweep_loop(), name="reach-liveness"))
        self.started = True

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
            now = self.clock()
            if self.registry.sweep(now):
                self.gateway.agents_changed()
            if now >= next_prune:
                self.gateway.prune_keys(now - self.settings.idempotency_ttl)
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
            [c.model_dump() for c in reg.capabilities], record.max_concurrency, self.clock())

    # ------------------------------------------------------------ admin surface

    def agents(self) -> list[dict[str, Any]]:
        """Every known agent: name, agent_id, state, in-flight, capabilities, breaker, ..."""
        now = self.clock()
        return [r.view(now) for r in sorted(self.registry.by_id.values(), key=lambda r: r.name)]

    def dead_letters(self, *, capability: str | None = None, agent: str | None = None,
                     error: str | None = None) -> list[dict[str, Any]]:
        """Unresolved dead letters (envelope, error, attempts), oldest first; filterable."""
        out = []
        for task in sorted(self.gateway.dead.values(), key=lambda t: t.envelope.created_at):
            if capability is not None and task.envelope.capability != capability:
                continue
            if agent is not None and not any(a.agent == agent for a in task.attempts):
                continue
            if error is not None and error.lower() not in str(task.error).lower():
                continue
            out.append({"task_id": task.task_id, "envelope": task.envelope.to_dict(),
                        "error": task.error, "attempts": [a.to_dict() for a in task.attempts],
                        "dead_since": task.updated_at})
        return out

    async def replay(self, task_id: str) -> dict[str, Any]:
        """Run a dead letter again; returns its outcome view once it ends."""
        task = self.gateway.dead.get(task_id)
        if task is None or task.state is not TaskState.DEAD:
            raise ReachError(f"{task_id!r} is not an unresolved dead letter; "
                             f"see reach.dead_letters()")
        self.gateway.replay(task)
        fut = self.gateway.outcome(task_id)
        if fut is not None:
            await asyncio.shield(fut)
        return task.view()

    def trace(self, trace_id: str) -> list[dict[str, Any]]:
        """The ordered events of one call chain: every task, state and attempt, with times."""
        events: list[dict[str, Any]] = []
        for tid in self.gateway.traces.get(trace_id, ()):
            task = self.gateway.find(tid)
            if task is not None:
                events.extend(_events(task))
        events.sort(key=lambda e: e["at"])
        return events

    async def task(self, task_id: str) -> dict[str, Any] | None:
        """A task's full view, from memory or the store."""
        task = await self.gateway.task(task_id)
        return None if task is None else task.view()


def _events(task: Task) -> list[dict[str, Any]]:
    env = task.envelope
    return [{"task_id": env.task_id, "parent_task_id": env.parent_task_id,
             "capability": env.capability, "caller": env.caller, "state": state, "at": at,
             "note": note} for state, at, note in task.history]
