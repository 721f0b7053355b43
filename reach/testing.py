"""Test helpers and the pytest plugin (entry point ``pytest11``): in-memory clusters on loopback.

In your own suite (with pytest-asyncio)::

    async def test_my_planner(reach_cluster):
        await reach_cluster.add_agent("sales", {"sales.query": query_sales}, idempotent=True)
        client = await reach_cluster.client("planner")
        assert await client.call("sales.query", {"region": "east"}) == {...}

Each cluster is a real coordinator on a free loopback port with an in-memory store and
millisecond heartbeats; it shares nothing with any other cluster and stops with the test.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from reach.core.tasks import Task
from reach.ports import Reply, Work
from reach.reach import Reach
from reach.sdk.agent import Agent
from reach.sdk.client import Client


async def wait_until(predicate: Callable[[], bool], timeout: float = 3.0,
                     interval: float = 0.005) -> None:
    """Poll ``predicate`` until it holds; ``AssertionError`` after ``timeout`` seconds.
    For conditions that become true by themselves (an agent going offline, say)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


class Cluster:
    """A coordinator plus the agents and clients a test adds; ``close()`` stops them all."""

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.agents: list[Agent] = []
        self.clients: list[Client] = []

    @classmethod
    async def start(cls, **options: Any) -> Cluster:
        """Start a coordinator; options are ``Reach.start`` options (fast defaults for tests:
        50 ms heartbeats; an agent suspected after 4 silent beats and offline after 6, not
        Settings' 2 and 3, as a test process that stalls its loop for 150 ms, a Textual app
        starting say, would otherwise lose its agents)."""
        defaults: dict[str, Any] = {"heartbeat_interval": 0.05, "ack_timeout": 1.0,
                                    "recovery_grace": 0.5, "suspect_after": 4.0,
                                    "offline_after": 6.0}
        defaults.update(options)
        return cls(await Reach.start(**defaults))

    @property
    def url(self) -> str:
        return self.reach.url

    async def add_agent(self, name: str, handlers: Mapping[str, Callable[..., Any]], *,
                        max_concurrency: int = 20, token: str | None = None,
                        each: Mapping[str, Mapping[str, Any]] | None = None,
                        **capability: Any) -> Agent:
        """Connect an agent serving ``{capability name: function}``; extra keywords
        (``params``, ``returns``, ``fallback``, ``idempotent``, ``latency_ms``, ``weight``,
        ``scope``, ``intents``, ``warmup_s``) apply to every capability, and ``each`` adds
        keywords for one capability
        (``each={"report.build": {"latency_ms": 40_000, "max_concurrency": 2}}``)."""
        agent = Agent(name, token=token, max_concurrency=max_concurrency, reconnect_base=0.02)
        for cap_name, fn in handlers.items():
            agent.capability(cap_name, **{**capability, **(each or {}).get(cap_name, {})})(fn)
        await agent.connect(self.url)
        self.agents.append(agent)
        return agent

    async def client(self, caller: str = "test", token: str | None = None) -> Client:
        client = await Client.connect(self.url, caller=caller, token=token)
        self.clients.append(client)
        return client

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        for agent in self.agents:
            await agent.close(drain=1.0)
        await self.reach.stop()


async def _cluster() -> AsyncIterator[Cluster]:
    cluster = await Cluster.start()
    try:
        yield cluster
    finally:
        await cluster.close()


try:  # the fixture needs pytest-asyncio; without it, the plugin adds nothing
    import pytest
    import pytest_asyncio

    reach_cluster = pytest_asyncio.fixture(_cluster, name="reach_cluster")

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_pycollect_makeitem(collector: Any, name: str, obj: object) -> Any:
        """Mark ``async def`` tests that use ``reach_cluster`` as asyncio tests.

        In pytest-asyncio's default (strict) mode an unmarked ``async def`` test is not run
        ("async def functions are not natively supported"), so the README's example would
        fail when pasted into a new project. Only tests asking for this plugin's fixture are
        marked; every other test is left to the project's own settings. ``trylast`` makes
        this wrapper the innermost, so pytest-asyncio's wrapper sees the mark."""
        outcome = yield
        made = outcome.get_result()
        for item in made if isinstance(made, list) else [made]:
            if (isinstance(item, pytest.Function)
                    and "reach_cluster" in item.fixturenames
                    and inspect.iscoroutinefunction(getattr(item, "obj", None))
                    and item.get_closest_marker("asyncio") is None):
                item.add_marker(pytest.mark.asyncio)
except ImportError:  # pragma: no cover
    pass


# ---------------------------------------------------------------- fakes for the ports
#
# The gateway reaches agents through ``ports.AgentLink``, stores through ``ports.TaskStore``
# and tells time through ``ports.Clock``. With these three fakes a test builds a real
# ``Gateway`` with no socket, no database and no sleeping, and moves time by hand:
#
#     clock = ManualClock()
#     gateway = Gateway(Settings(), registry, Router(), MemoryStore(), clock)
#     link = FakeAgentLink(respond=lambda work: ("ok", work.params))
#     ...register an agent whose link is ``link``...
#     await clock.advance(0.5)       # timers due within 0.5 s fire, in order


class _ManualTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A ``ports.Clock`` that stands still until ``advance`` moves it: deadlines, backoff,
    queue waits and breaker windows all follow it (``wall`` moves with ``now``)."""

    def __init__(self, wall: float = 1_800_000_000.0, settle_steps: int = 64) -> None:
        self._now = 0.0
        self._wall0 = wall
        self._timers: list[tuple[float, int, _ManualTimer, Callable[[], None]]] = []
        self._seq = 0
        self.settle_steps = settle_steps

    def wall(self) -> float:
        return self._wall0 + self._now

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, fn: Callable[[], None]) -> _ManualTimer:
        timer = _ManualTimer()
        self._seq += 1
        heapq.heappush(self._timers, (when, self._seq, timer, fn))
        return timer

    async def sleep(self, delay: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_at(self._now + max(0.0, delay),
                             lambda: None if fut.done() else fut.set_result(None))
        try:
            await fut
        finally:
            timer.cancel()

    def pending(self) -> int:
        """Timers not yet fired nor cancelled."""
        return sum(1 for _, _, t, _ in self._timers if not t.cancelled)

    async def settle(self) -> None:
        """Let the loop run what is ready (woken coroutines) without moving time."""
        for _ in range(self.settle_steps):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing each timer due on the way at its own
        time, in order, and letting the loop run after each (so a woken task's next timer,
        when due within the step, fires too)."""
        target = self._now + seconds
        await self.settle()
        while self._timers and self._timers[0][0] <= target:
            when, _, timer, fn = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            fn()
            await self.settle()
        self._now = target
        await self.settle()


Respond = Callable[[Work], "tuple[str, Any] | str | None"]


class FakeAgentLink:
    """A ``ports.AgentLink`` with no transport: the test decides what each delivery does.

    ``respond(work)`` is asked at each delivery and returns ``("ok", result)``,
    ``("fault", message)``, ``("answer", message)`` (a deliberate TaskError answer),
    ``"hang"`` (acknowledged, never answered), ``"silent"`` (never acknowledged) or None
    (acknowledged; the test answers later with ``finish``). ``accepts=False`` makes every
    delivery fail at once, like a link that is closing."""

    def __init__(self, respond: Respond | None = None, *, accepts: bool = True) -> None:
        self.respond = respond
        self.accepts = accepts
        self.delivered: list[Work] = []
        self.cancelled: list[tuple[str, int]] = []
        self._untold: set[tuple[str, int]] = set()  # given up without telling the agent
        self.pending: dict[tuple[str, int], Reply] = {}
        self.closed: str | None = None

    def deliver(self, work: Work, reply: Reply) -> bool:
        if not self.accepts or self.closed is not None:
            return False
        self.delivered.append(work)
        self.pending[(work.task_id, work.attempt)] = reply
        what = None if self.respond is None else self.respond(work)
        if what == "silent":
            return True
        reply.ack()
        if isinstance(what, tuple):
            self.finish(work.task_id, *what, attempt=work.attempt)
        return True

    def finish(self, task_id: str, kind: str, payload: Any = None,
               attempt: int | None = None) -> None:
        """Answer a delivered attempt (the latest of the task when ``attempt`` is None)."""
        if attempt is None:
            attempt = max(a for t, a in self.pending if t == task_id)
        reply = self.pending.pop((task_id, attempt))
        if kind == "ok":
            reply.resolve("ok", payload)
        elif kind in ("fault", "answer"):
            details = {"answer": True} if kind == "answer" else {}
            reply.resolve("error", {"code": "task_failed", "message": str(payload),
                                    "details": details})
        else:
            reply.resolve(kind, payload)

    def lose(self) -> None:
        """The link went away: every attempt in flight is lost."""
        for reply in list(self.pending.values()):
            reply.resolve("lost")
        self.pending.clear()

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        """Forget the attempt; ``cancelled`` lists those the agent was told to stop, as a
        websocket agent would be: still in flight, or given up untold before."""
        key = (task_id, attempt)
        live = self.pending.pop(key, None) is not None or key in self._untold
        if not tell:
            if live:
                self._untold.add(key)
            return
        self._untold.discard(key)
        if live:
            self.cancelled.append(key)

    async def close(self, reason: str) -> None:
        self.closed = reason
        self.lose()


class MemoryStore:
    """A ``ports.TaskStore`` in a dict: every write commits at the next turn of the loop
    (``fail_next`` makes the next commit fail, as a full disk would)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.agents: dict[str, dict[str, Any]] = {}
        self.fail_next = False

    def _commit(self, task: Task) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail_next:
            self.fail_next = False
            fut.set_exception(OSError("disk full (MemoryStore.fail_next)"))
        else:
            self.rows[task.task_id] = task.view()
            fut.set_result(None)
        return fut

    def insert(self, task: Task) -> asyncio.Future[None]:
        return self._commit(task)

    def update(self, task: Task) -> None:
        self.rows[task.task_id] = task.view()

    def persist(self, task: Task) -> asyncio.Future[None]:
        return self._commit(task)

    async def get(self, task_id: str) -> Task | None:
        return None  # what the gateway keeps in memory is all a unit test needs

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def unfinished(self) -> list[Task]:
        return []

    async def chained(self, since: float) -> list[Task]:
        return []

    async def dead(self, limit: int = 10_000, since: float | None = None) -> list[Task]:
        return []

    async def amend(self, task: Task) -> None:
        self.rows[task.task_id] = task.view()

    async def keys_since(self, since: float, limit: int | None = None
                         ) -> list[tuple[str, str, float]]:
        return []

    async def agent_ids(self) -> dict[str, str]:
        return {name: row["agent_id"] for name, row in self.agents.items()}

    async def declared(self) -> dict[str, list[str]]:
        return {}

    async def save_agent(self, agent_id: str, name: str, version: str,
                         capabilities: list[Any], max_concurrency: int, now: float) -> None:
        self.agents[name] = {"agent_id": agent_id, "version": version,
                             "capabilities": capabilities, "max_concurrency": max_concurrency}
