"""Plumbing for the cluster drills (issue 15): coordinators as ``reach serve --cluster``
subprocesses on one PostgreSQL, agents and callers in the test process that know every node's
URL, a load that submits each task under its own idempotency key, a look at the store and at a
node's admin feed, and a TCP proxy that can cut one node off from PostgreSQL.

Every process and socket made here is closed by its owner (the ``spawn`` fixture, the proxy's
``close``), pass or fail.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import websockets
from relay import Relay
from subprocs import Proc

from reach import Agent, Client, Context, ReachError

TOKEN = "drill-admin-token"
HEARTBEAT = 0.1  # the nodes' heartbeat interval: the unit the drills measure moves in
LEASE = 1.0      # seconds a node's lease lasts (renewed every third of it)
RETRYABLE = ("unavailable", "no_route", "fenced")


async def start_node(spawn: Callable[..., Proc], name: str, store: str) -> tuple[Proc, str]:
    """A ``reach serve --cluster`` node on any free port; returns it and its websocket URL
    (read from the line it prints once it listens)."""
    proc = spawn(name, "-m", "reach.cli", "serve", "--port", 0, "--no-http", "--store", store,
                 "--cluster", "--lease", LEASE, "--admin-token", TOKEN,
                 "--heartbeat-interval", HEARTBEAT, "--recovery-grace", 5,
                 "--log-level", "WARNING")
    line = await proc.wait_for("coordinator listening on", timeout=30)
    url = line.split("listening on ", 1)[1].split()[0]
    return proc, url


async def until(check: Callable[[], Any], limit: float = 20.0, every: float = 0.01) -> None:
    async with asyncio.timeout(limit):
        while not check():
            await asyncio.sleep(every)


def leases(at: float | None, since: float) -> str:
    """``at - since`` in leases, for a drill's report ("-": it never happened)."""
    return "-" if at is None else f"{(at - since) / LEASE:.1f}"


# ---------------------------------------------------------------- what the nodes say


def query(store: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows straight from the cluster's database (psycopg, autocommit; a short, blocking
    round trip to loopback: the drills call it between phases, not under load)."""
    import psycopg
    with psycopg.connect(store, autocommit=True, connect_timeout=5) as conn:
        return [tuple(r) for r in conn.execute(sql, args)]


def live_nodes(store: str) -> dict[str, str]:
    """Node id → URL of the nodes whose lease has not run out (the database's clock)."""
    return {n: u for n, u in query(store, "SELECT node_id, url FROM reach_nodes WHERE "
                                          "lease_until > extract(epoch from clock_timestamp())")}


async def stored_when_settled(store: str, total: int, limit: float = 10.0) -> dict[str, str]:
    """Key → state of every stored task, once ``total`` are stored and all succeeded (a
    task's last state is written behind its answer: the store may lag the caller a little)."""
    rows: dict[str, str] = {}
    async with asyncio.timeout(limit):
        while True:
            rows = {k: s for k, s in query(store, "SELECT idempotency_key, state FROM "
                                                  "reach_tasks")}
            if len(rows) >= total and set(rows.values()) == {"succeeded"}:
                return rows
            await asyncio.sleep(0.05)


def all_nodes(store: str) -> dict[str, str]:
    return {n: u for n, u in query(store, "SELECT node_id, url FROM reach_nodes")}


async def admin_snapshot(url: str) -> dict[str, Any]:
    """The first frame of a node's admin feed (what reach-dash shows): its agents, each with
    the node holding its connection, and the coordinator with its node id."""
    async with websockets.connect(url, max_size=None, open_timeout=10) as ws:
        await ws.send(json.dumps({"v": 1, "type": "admin", "token": TOKEN}))
        async with asyncio.timeout(10):
            while True:
                frame = json.loads(await ws.recv())
                if frame.get("type") == "snapshot":
                    return dict(frame)
                if frame.get("type") == "error":
                    raise AssertionError(f"admin feed of {url} refused: {frame}")


# ---------------------------------------------------------------- agents and load


class Runs:
    """Handler executions per idempotency key, counted in the agents' handler itself."""

    def __init__(self) -> None:
        self.by_key: collections.Counter[str] = collections.Counter()
        self.by_agent: collections.Counter[str] = collections.Counter()
        self.log: list[tuple[str, str, str, int]] = []  # (key, agent, task id, attempt)

    def twice(self) -> dict[str, int]:
        return {k: c for k, c in self.by_key.items() if c > 1}


def worker(name: str, runs: Runs, work_s: float = 0.02) -> Agent:
    """An agent serving ``drill.work`` (idempotent, a short handler) that counts its runs."""
    agent = Agent(name, heartbeat_interval=HEARTBEAT, reconnect_base=0.05, reconnect_cap=0.5)

    @agent.capability("drill.work", idempotent=True, latency_ms=50)
    async def work(n: int, ctx: Context) -> dict[str, Any]:
        runs.by_key[ctx.idempotency_key] += 1
        runs.by_agent[name] += 1
        runs.log.append((ctx.idempotency_key, name, ctx.task_id, ctx.attempt))
        await asyncio.sleep(work_s)
        return {"n": n, "by": name}

    return agent


def rotated(urls: Sequence[str], i: int) -> list[str]:
    """``urls`` starting at the ``i``-th: caller ``i`` prefers node ``i``."""
    k = i % len(urls)
    return [*urls[k:], *urls[:k]]


class Load:
    """``total`` tasks, each under its own key, submitted by ``width`` workers over the given
    callers (worker ``i`` uses caller ``i % len``). A submit that is refused or lost is not
    acknowledged: the worker tries again with the same key (the caller's part). Once
    acknowledged, the worker waits for the result through its handle, whatever node the caller
    is on by then."""

    def __init__(self, clients: Sequence[Client], total: int, width: int,
                 prefix: str = "k") -> None:
        self.clients, self.total, self.width, self.prefix = clients, total, width, prefix
        self.acked: dict[str, str] = {}     # key → task id, once submit returned
        self.acked_by: dict[str, str] = {}  # key → the URL of the node that acknowledged it
        self.acked_at: dict[str, float] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.done_at: dict[str, float] = {}  # key → when its result came back
        self.errors: dict[str, str] = {}    # key → error code of a result that failed
        self.refused: collections.Counter[str] = collections.Counter()
        self.submitting: dict[str, str] = {}  # key → the caller's node, while its submit runs
        self._todo = collections.deque(range(total))

    def key(self, n: int) -> str:
        """Task ``n``'s idempotency key (``prefix`` + its number)."""
        return f"{self.prefix}{n:04d}"

    async def run(self, deadline_s: float = 40.0) -> None:
        async with asyncio.TaskGroup() as tg:
            for i in range(self.width):
                tg.create_task(self._worker(self.clients[i % len(self.clients)], deadline_s))

    async def _worker(self, client: Client, deadline_s: float) -> None:
        while self._todo:
            n = self._todo.popleft()
            key = self.key(n)
            give_up = time.monotonic() + deadline_s
            self.submitting[key] = client.url
            while True:
                try:
                    handle = await client.submit("drill.work", {"n": n}, idempotency_key=key,
                                                 timeout=20)
                    break
                except ReachError as exc:
                    if exc.code not in RETRYABLE or time.monotonic() > give_up:
                        raise
                    self.refused[exc.code] += 1
                    await asyncio.sleep(0.02)
            self.submitting.pop(key, None)
            assert self.acked.setdefault(key, handle.task_id) == handle.task_id
            self.acked_by.setdefault(key, client.url)
            self.acked_at.setdefault(key, time.monotonic())
            try:
                self.results[key] = await handle.result(timeout=deadline_s)
                self.done_at[key] = time.monotonic()
            except ReachError as exc:
                self.errors[key] = exc.code


# ---------------------------------------------------------------- a link that can be cut


class PgProxy(Relay):
    """A loopback TCP proxy in front of PostgreSQL. ``cut()`` closes its listening socket and
    every connection it carries (a partition: new connections are refused, open ones reset);
    ``heal()`` listens again on the same port."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        super().__init__(parts.port or 5432, parts.hostname or "127.0.0.1")
        self.target = target

    @property
    def url(self) -> str:
        """The database URL through this proxy."""
        parts = urlsplit(self.target)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    async def heal(self) -> PgProxy:
        return await self.start()

    async def close(self) -> None:
        await self.cut()
