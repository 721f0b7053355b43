#!/usr/bin/env python3
"""Relay benchmark: caller → Reach → agent, beside a raw websockets relay, in one run.

    python bench/relay.py                 # full run: 3 rounds, median per row
    python bench/relay.py --quick         # a tiny smoke run (a few seconds)
    python bench/relay.py --profile cprofile --profile-dir /tmp/prof   # + a profiled batch

Every chain is three OS processes — caller, middle, agent — all of them this script started
with a ``--role``:

    raw:       caller ──ws──▶ raw relay (correlation ids only) ──ws──▶ echo agent
    raw-eager: the same, every send written at once like Reach's outbox (not `await ws.send`)
    reach:     caller (Client) ──ws──▶ Reach coordinator ──ws──▶ Agent SDK echo capability

Ratios are taken against the *floor*: the best of the two raw relays in this run, column by
column, so Reach gains nothing from a write technique the floor did not also get.

Reach is measured with durable tasks on a SQLite *file* store (a temp dir) and on the in-memory
store. Each configuration runs with 1 and with 64 calls in flight; a row is the median over
``--rounds`` rounds (configurations interleaved inside each round, order rotated per round).
Targets are printed with PASS/MISS; a miss never makes the exit status non-zero. Below them,
the CPU time each process spent per call (from ``time.process_time`` around the batch) shows
where the cost sits; ``-v`` adds per-round numbers and coordinator stats (GC pauses, group
commits, attempt outcomes, breaker state), ``--profile`` profiles the three Reach processes
during one extra, uncounted batch.

The echo capability declares ``latency_ms=50`` (``--latency-ms``): Reach derives its
completion timeout from it, so a pause in any process can turn into timeouts and retries, and
those show up in the ``errors`` column rather than being hidden.

Children are driven over their stdin (one command per line) and answer on stdout with lines
starting ``BENCH``. A child whose stdin closes exits, so the parent dying (even by SIGKILL)
leaves no orphan behind; the parent also terminates and then kills every child in ``finally``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import itertools
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

PAYLOAD: dict[str, Any] = {"data": "x" * 200}  # ~200 bytes, the same for both chains
WS_OPTIONS: dict[str, Any] = {"compression": None, "max_size": 1 << 20, "ping_interval": None}
TAG = "BENCH"
STARTUP_TIMEOUT = 60.0
STOP_GRACE = 5.0
MAX_STRAY_LINES = 10_000
TARGET_THROUGHPUT = 0.40  # Reach calls/s at 64 in flight ≥ 40 % of raw
TARGET_P50 = 2.0          # Reach p50 at 1 in flight ≤ 2× raw


# =====================================================================================
# children: shared plumbing
# =====================================================================================


def _say(*parts: Any) -> None:
    """One protocol line to the parent."""
    sys.stdout.write(" ".join([TAG, *(str(p) for p in parts)]) + "\n")
    sys.stdout.flush()


def _commands() -> tuple[asyncio.Queue[str], asyncio.Event]:
    """Lines from stdin as a queue, and an event set when stdin closes or on SIGINT/SIGTERM."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str] = asyncio.Queue()
    stop = asyncio.Event()

    def call(fn: Callable[..., Any], *a: Any) -> None:
        with contextlib.suppress(RuntimeError):  # loop already closed: we are exiting anyway
            loop.call_soon_threadsafe(fn, *a)

    def read() -> None:
        try:
            for line in sys.stdin:
                call(queue.put_nowait, line.strip())
        except (OSError, ValueError):
            pass
        call(stop.set)

    threading.Thread(target=read, name="bench-stdin", daemon=True).start()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return queue, stop


async def _serve_commands(handle: Callable[[list[str]], Awaitable[None]] | None = None) -> None:
    """Answer commands until stdin closes, a signal comes, or ``quit``; a stop also cancels
    the command in progress (a batch against a dead coordinator must not hold us)."""
    queue, stop = _commands()
    loop = asyncio.get_running_loop()
    stopping = loop.create_task(stop.wait())
    profiler: _Profiler | None = None

    async def until_stop(aw: Awaitable[Any]) -> tuple[bool, Any]:
        work = asyncio.ensure_future(aw)
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            return False, None
        return True, work

    try:
        while True:
            ok, got = await until_stop(queue.get())
            if not ok:
                return
            words = got.result().split()
            if not words:
                continue
            if words[0] == "quit":
                return
            if words[0] == "cpu":  # this process's CPU seconds so far, all threads
                _say("CPU", time.process_time())
                continue
            if words[0] == "profile-start":  # profile-start pyinstrument|cprofile
                profiler = _Profiler(words[1])
                profiler.start()
                _say("OK")
                continue
            if words[0] == "profile-stop" and profiler is not None:  # profile-stop PATH
                profiler.stop(words[1])
                profiler = None
                _say("OK", words[1])
                continue
            if handle is None:
                _say("ERR", "unknown-command", words[0])
                continue
            ok, work = await until_stop(handle(words))
            if not ok:
                return
            if work.exception() is not None:  # report it, keep serving: the parent decides
                exc = work.exception()
                _say("ERR", type(exc).__name__, json.dumps(str(exc)))
    finally:
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)


# -------------------------------------------------------------------- raw relay (middle)


def _sender(ws: Any, eager: bool) -> Callable[[str], Awaitable[None]]:
    """``await ws.send`` (websockets' own way), or with ``eager`` the write path Reach uses
    (reach.outbox.Outbox: write at once when the socket is free, coalesce when busy), so the
    floor is measured with the same technique as the thing compared against it."""
    if not eager:
        return ws.send  # type: ignore[no-any-return]
    from reach.outbox import Outbox
    out = Outbox(ws)

    async def send(text: str) -> None:
        out.post(text)
    return send


async def role_relay(args: argparse.Namespace) -> None:
    """Caller frames ``{"id", "payload"}`` go to the agent under a relay-wide id; the agent's
    echo goes back to the caller that sent it, under that caller's own id. Nothing else."""
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    agents: list[ServerConnection] = []
    pending: dict[int, tuple[ServerConnection, Any]] = {}
    ids = itertools.count(1)
    senders: dict[Any, Callable[[str], Awaitable[None]]] = {}

    def sender(ws: Any) -> Callable[[str], Awaitable[None]]:
        if ws not in senders:
            senders[ws] = _sender(ws, args.eager)
        return senders[ws]

    async def agent_session(ws: ServerConnection) -> None:
        agents.append(ws)
        try:
            async for raw in ws:
                msg = json.loads(raw)
                route = pending.pop(msg["id"], None)
                if route is None:
                    continue
                caller, msg["id"] = route
                with contextlib.suppress(ConnectionClosed):
                    await sender(caller)(json.dumps(msg))
        finally:
            agents.remove(ws)

    async def caller_session(ws: ServerConnection) -> None:
        mine: set[int] = set()
        try:
            async for raw in ws:
                msg = json.loads(raw)
                if not agents:
                    await sender(ws)(json.dumps({"id": msg["id"], "error": "no agent"}))
                    continue
                rid = next(ids)
                pending[rid] = (ws, msg["id"])
                mine.add(rid)
                msg["id"] = rid
                await sender(agents[0])(json.dumps(msg))
                if len(mine) > 4096:  # forget answered ids now and then (bounded memory)
                    mine.intersection_update(pending)
        finally:
            for rid in mine:
                pending.pop(rid, None)

    async def handler(ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else ""
        try:
            if path == "/agent":
                await agent_session(ws)
            else:
                await caller_session(ws)
        except ConnectionClosed:
            pass

    async with serve(handler, "127.0.0.1", args.port, **WS_OPTIONS) as server:
        port = server.sockets[0].getsockname()[1]
        _say("READY", f"ws://127.0.0.1:{port}")
        await _serve_commands()


# -------------------------------------------------------------------- raw echo agent


async def role_echo(args: argparse.Namespace) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(args.url + "/agent", open_timeout=10, **WS_OPTIONS) as ws:
        send = _sender(ws, args.eager)

        async def echo() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:
                    msg = json.loads(raw)
                    await send(json.dumps({"id": msg["id"], "payload": msg["payload"]}))

        worker = asyncio.get_running_loop().create_task(echo())
        _say("READY", args.url)
        try:
            await _serve_commands()
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)


# -------------------------------------------------------------------- Reach coordinator


class _Profiler:
    """pyinstrument or cProfile over the coordinator's event-loop thread, on command."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "pyinstrument":
            from pyinstrument import Profiler
            self._prof: Any = Profiler(interval=0.0005, async_mode="disabled")
        elif kind == "cprofile":
            import cProfile
            self._prof = cProfile.Profile()
        else:
            raise ValueError(f"unknown profiler {kind!r}; use pyinstrument or cprofile")
        self._cpu = 0.0

    def start(self) -> None:
        self._cpu = time.process_time()
        if self.kind == "pyinstrument":
            self._prof.start()
        else:
            self._prof.enable()

    def stop(self, path: str) -> None:
        cpu = time.process_time() - self._cpu
        if self.kind == "pyinstrument":
            self._prof.stop()
            text = self._prof.output_text(unicode=False, color=False, show_all=False)
        else:
            import io
            import pstats
            self._prof.disable()
            buf = io.StringIO()
            stats = pstats.Stats(self._prof, stream=buf)
            stats.sort_stats("tottime").print_stats(45)
            stats.sort_stats("cumulative").print_stats(45)
            text = buf.getvalue()
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"# process CPU time while profiled (all threads): {cpu:.3f} s\n")
            fh.write(text)


class _GcWatch:
    """Counts the garbage collector's pauses per generation (a coordinator-side hot spot)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total = [0.0, 0.0, 0.0]
        self.worst = [0.0, 0.0, 0.0]
        self._t0 = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        gen = info.get("generation", 0)
        took = time.perf_counter() - self._t0
        self.count[gen] += 1
        self.total[gen] += took
        self.worst[gen] = max(self.worst[gen], took)

    def view(self) -> dict[str, Any]:
        return {"gc_count": self.count, "gc_total_ms": [round(t * 1000, 1) for t in self.total],
                "gc_worst_ms": [round(t * 1000, 2) for t in self.worst]}


async def role_reach(args: argparse.Namespace) -> None:
    from reach import Reach

    gc_watch = _GcWatch()
    from reach.cli import tune_gc

    reach = await Reach.start(store=args.store, port=args.port, heartbeat_interval=10.0)
    tune_gc()  # as `reach serve` does
    # Time each group commit (instrumentation only; the store's behaviour is unchanged).
    commit_times: list[float] = []
    commit = reach.store._commit

    def timed_commit(*a: Any) -> None:
        t0 = time.perf_counter()
        try:
            commit(*a)
        finally:
            commit_times.append(time.perf_counter() - t0)
            if len(commit_times) > 200_000:
                del commit_times[:100_000]

    reach.store._commit = timed_commit  # type: ignore[method-assign]

    async def handle(words: list[str]) -> None:
        if words[0] == "stats":
            gw, store = reach.gateway, reach.store
            outcomes: dict[str, int] = {}
            for task in list(gw.recent.values()):
                for attempt in task.attempts:
                    outcomes[attempt.outcome] = outcomes.get(attempt.outcome, 0) + 1
            agents = [{k: a.get(k) for k in ("name", "state", "breaker", "calls", "faults")}
                      for a in reach.agents()]
            _say("STATS", json.dumps({
                "attempt_outcomes": outcomes, "agents": agents,
                "commits": store.commits, "rows_written": store.rows_written,
                "live": len(gw.live), "recent": len(gw.recent), "traces": len(gw.traces),
                "keys": len(gw.keys), "outcomes": len(gw._outcomes),
                "commits_pending": len(gw._commits), "drivers": len(gw._drivers),
                "cpu_s": round(time.process_time(), 3), **gc_watch.view(),
                "commit_ms_total": round(sum(commit_times) * 1000, 1),
                "commit_ms_p50": round(_percentile(sorted(commit_times), 0.5) * 1000, 3),
                "commit_ms_worst": round(max(commit_times, default=0.0) * 1000, 2),
                "commits_over_2ms": sum(1 for t in commit_times if t > 0.002)}))
        else:
            _say("ERR", "unknown-command", words[0])

    try:
        _say("READY", reach.url)
        await _serve_commands(handle)
    finally:
        await reach.stop()


# -------------------------------------------------------------------- Reach agent (SDK)


async def role_reach_agent(args: argparse.Namespace) -> None:
    from reach import Agent

    agent = Agent("echo", max_concurrency=256)

    @agent.capability("echo.run", params={"type": "object"}, idempotent=True,
                      latency_ms=args.latency_ms)
    async def echo(**params: Any) -> dict[str, Any]:
        return params

    await agent.connect(args.url)
    try:
        _say("READY", args.url)
        await _serve_commands()
    finally:
        await agent.close(drain=2.0)


# -------------------------------------------------------------------- caller


class _RawCaller:
    def __init__(self, eager: bool = False) -> None:
        self._eager = eager
        self._send: Any = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ws: Any = None
        self._reader: asyncio.Task[None] | None = None

    async def open(self, url: str) -> None:
        from websockets.asyncio.client import connect
        self._ws = await connect(url + "/caller", open_timeout=10, **WS_OPTIONS)
        self._send = _sender(self._ws, self._eager)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed
        try:
            async for raw in self._ws:
                msg = json.loads(raw)
                fut = self._pending.pop(msg["id"], None)
                if fut is None or fut.done():
                    continue
                if "error" in msg:
                    fut.set_exception(RuntimeError(msg["error"]))
                else:
                    fut.set_result(msg["payload"])
        except ConnectionClosed:
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("relay connection lost"))
            self._pending.clear()

    async def call(self) -> Any:
        req = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req] = fut
        try:
            await self._send(json.dumps({"id": req, "payload": PAYLOAD}))
            return await fut
        finally:
            self._pending.pop(req, None)

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


class _ReachCaller:
    def __init__(self) -> None:
        self._client: Any = None

    async def open(self, url: str) -> None:
        from reach import Client
        # A coordinator that died mid-run shows up as errors within seconds, not a minute.
        self._client = await Client.connect(url, caller="bench", reconnect_for=5.0)

    async def call(self) -> Any:
        return await self._client.call("echo.run", PAYLOAD)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def _batch(call: Callable[[], Awaitable[Any]], inflight: int, calls: int,
                 limit: float) -> dict[str, Any]:
    """``calls`` calls with ``inflight`` of them outstanding at any time, bounded by ``limit`` s."""
    latencies: list[float] = []
    errors: list[str] = []
    todo = iter(range(calls))  # shared by the workers: each call is taken exactly once
    clock = time.perf_counter

    async def worker() -> None:
        for _ in todo:
            t0 = clock()
            try:
                result = await call()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(clock() - t0)
            if result != PAYLOAD:
                errors.append("wrong echo")

    workers = [asyncio.get_running_loop().create_task(worker())
               for _ in range(min(inflight, calls))]
    started = clock()
    timed_out = False
    try:
        async with asyncio.timeout(limit):
            await asyncio.gather(*workers)
    except TimeoutError:
        timed_out = True
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    elapsed = clock() - started
    latencies.sort()
    return {"inflight": inflight, "calls": calls, "ok": len(latencies), "errors": len(errors),
            "first_error": errors[0] if errors else None, "timed_out": timed_out,
            "seconds": elapsed, "rate": len(latencies) / elapsed if elapsed > 0 else 0.0,
            "p50_ms": _percentile(latencies, 0.50) * 1000,
            "p99_ms": _percentile(latencies, 0.99) * 1000}


async def role_caller(args: argparse.Namespace) -> None:
    caller: _RawCaller | _ReachCaller = (_RawCaller(args.eager) if args.kind == "raw"
                                         else _ReachCaller())
    await caller.open(args.url)

    async def handle(words: list[str]) -> None:
        # run INFLIGHT CALLS LIMIT_S
        if words[0] != "run":
            _say("ERR", "unknown-command", words[0])
            return
        result = await _batch(caller.call, int(words[1]), int(words[2]), float(words[3]))
        _say("RESULT", json.dumps(result))

    try:
        _say("READY", args.url)
        await _serve_commands(handle)
    finally:
        await caller.close()


ROLES: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    "relay": role_relay, "echo": role_echo, "reach": role_reach,
    "reach-agent": role_reach_agent, "caller": role_caller,
}


# =====================================================================================
# parent: orchestration and the table
# =====================================================================================


class ChildFailed(RuntimeError):
    pass


class Child:
    """One subprocess of this script, driven over stdin, answering ``BENCH ...`` on stdout."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log_path: str) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path

    @classmethod
    async def spawn(cls, name: str, role_args: list[str], log_dir: str) -> Child:
        log_path = os.path.join(log_dir, f"{name}.log")
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, os.path.abspath(__file__), *role_args,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return cls(name, proc, log_path)

    def _log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""

    async def expect(self, word: str, timeout: float) -> str:
        """The rest of the next ``BENCH <word> ...`` line (other lines are skipped)."""
        assert self.proc.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                for _ in range(MAX_STRAY_LINES):
                    raw = await self.proc.stdout.readline()
                    if not raw:
                        raise ChildFailed(f"{self.name} exited (code {await self.proc.wait()})"
                                          f"; its stderr ends with:\n{self._log_tail()}")
                    parts = raw.decode(errors="replace").rstrip("\n").split(" ", 2)
                    if parts[0] != TAG or len(parts) < 2:
                        continue
                    if parts[1] == "ERR":
                        raise ChildFailed(f"{self.name}: {' '.join(parts[2:])}")
                    if parts[1] == word:
                        return parts[2] if len(parts) > 2 else ""
        except TimeoutError:
            raise ChildFailed(f"{self.name} did not answer {word!r} within {timeout:.0f}s; "
                              f"its stderr ends with:\n{self._log_tail()}") from None
        raise ChildFailed(f"{self.name} printed too many lines")

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        await self.proc.stdin.drain()

    async def request(self, line: str, word: str, timeout: float) -> str:
        await self.send(line)
        return await self.expect(word, timeout)

    async def stop(self) -> None:
        """Close stdin (the child exits by itself), then SIGTERM, then SIGKILL."""
        proc = self.proc
        if proc.returncode is None and proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        for escalate in (None, proc.terminate, proc.kill):
            if proc.returncode is not None:
                break
            if escalate is not None:
                with contextlib.suppress(ProcessLookupError):
                    escalate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_GRACE):
                    await proc.wait()
        # Reap the pipes so no transport is left open.
        if proc.stdout is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await proc.stdout.read()


@dataclass
class Config:
    name: str       # row label: "raw", "raw-eager", "reach-sqlite-file", "reach-memory"
    kind: str       # "raw" | "reach"
    store: str | None = None
    eager: bool = False  # raw only: write like Reach's outbox instead of `await ws.send`
    caller: Child | None = None
    middle: Child | None = None
    agent: Child | None = None
    results: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


async def _start_chain(cfg: Config, log_dir: str, children: list[Child],
                       latency_ms: float) -> None:
    """Middle, then agent, then caller — each waited for by its READY line."""
    tag = cfg.name
    eager = ["--eager"] if cfg.eager else []
    if cfg.kind == "raw":
        middle_args = ["--role", "relay", "--port", "0", *eager]
        agent_role = "echo"
    else:
        assert cfg.store is not None
        middle_args = ["--role", "reach", "--port", "0", "--store", cfg.store]
        agent_role = "reach-agent"
    middle = await Child.spawn(f"{tag}-middle", middle_args, log_dir)
    children.append(middle)
    url = (await middle.expect("READY", STARTUP_TIMEOUT)).strip()
    agent = await Child.spawn(f"{tag}-agent", ["--role", agent_role, "--url", url,
                                               "--latency-ms", str(latency_ms), *eager],
                              log_dir)
    children.append(agent)
    await agent.expect("READY", STARTUP_TIMEOUT)
    caller = await Child.spawn(f"{tag}-caller",
                               ["--role", "caller", "--kind", cfg.kind, "--url", url, *eager],
                               log_dir)
    children.append(caller)
    await caller.expect("READY", STARTUP_TIMEOUT)
    cfg.middle, cfg.agent, cfg.caller = middle, agent, caller


async def _cpu(cfg: Config) -> list[float]:
    procs = (cfg.caller, cfg.middle, cfg.agent)
    return [float(await c.request("cpu", "CPU", 10)) for c in procs if c is not None]


async def _guarded(cfg: Config, request: Awaitable[str]) -> str:
    """``request`` to the caller, abandoned at once if the chain's middle or agent dies."""
    work = asyncio.ensure_future(request)
    others = [c for c in (cfg.middle, cfg.agent) if c is not None]
    deaths = {asyncio.ensure_future(c.proc.wait()): c for c in others}
    try:
        await asyncio.wait({work, *deaths}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            return work.result()
        dead = next(c for t, c in deaths.items() if t.done())
        raise ChildFailed(f"{dead.name} exited (code {dead.proc.returncode}) during a batch; "
                          f"its stderr ends with:\n{dead._log_tail()}")
    finally:
        for t in (work, *deaths):
            t.cancel()
        await asyncio.gather(work, *deaths, return_exceptions=True)


async def _run(cfg: Config, inflight: int, calls: int, warmup: int,
               limit: float) -> dict[str, Any]:
    """A warm-up batch (not counted), then the measured batch with each process's CPU time."""
    caller = cfg.caller
    assert caller is not None
    if warmup:
        await _guarded(cfg, caller.request(f"run {inflight} {warmup} {limit}", "RESULT",
                                           limit + 30))
    before = await _cpu(cfg)
    result: dict[str, Any] = json.loads(await _guarded(
        cfg, caller.request(f"run {inflight} {calls} {limit}", "RESULT", limit + 30)))
    after = await _cpu(cfg)
    # CPU microseconds per successful call: caller, middle, agent
    result["cpu_us"] = [(a - b) * 1e6 / max(1, result["ok"])
                        for a, b in zip(after, before, strict=True)]
    return result


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if not math.isnan(r[key])]
    return statistics.median(values) if values else math.nan


def _header() -> str:
    try:
        import websockets
        ws_version = websockets.__version__
    except ImportError:  # pragma: no cover
        ws_version = "?"
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    return (f"Agent-Reach relay benchmark  {now}\n"
            f"python {platform.python_version()} ({platform.python_implementation()}), "
            f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}, "
            f"websockets {ws_version}, load average {_load()}")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "n/a"


COLUMNS = (("config", "<18"), ("in-flight", ">9"), ("calls/s", ">9"), ("p50 ms", ">8"),
           ("p99 ms", ">8"), ("calls/s vs floor", ">16"), ("p50 vs floor", ">12"), ("errors", ">6"))


def _row(values: list[str]) -> str:
    return "  ".join(f"{v:{fmt}}" for v, (_, fmt) in zip(values, COLUMNS, strict=True))


def _floor(configs: list[Config], summary: dict[tuple[str, int], Any],
           level: int) -> dict[str, float]:
    """The best raw relay at ``level``: highest calls/s and lowest p50 of the raw rows."""
    raws = [summary[c.name, level] for c in configs if c.kind == "raw"]
    rates = [r["rate"] for r in raws if not math.isnan(r["rate"])]
    p50s = [r["p50"] for r in raws if not math.isnan(r["p50"])]
    return {"rate": max(rates) if rates else math.nan, "p50": min(p50s) if p50s else math.nan}


def _table(configs: list[Config], levels: list[int]) -> tuple[str, dict[tuple[str, int], Any]]:
    summary: dict[tuple[str, int], dict[str, float]] = {}
    for cfg in configs:
        for level in levels:
            rows = cfg.results.get(level, [])
            summary[cfg.name, level] = {
                "rate": _median(rows, "rate"), "p50": _median(rows, "p50_ms"),
                "p99": _median(rows, "p99_ms"), "errors": sum(r["errors"] for r in rows)}
    out = [_row([name for name, _ in COLUMNS]),
           _row(["-" * len(name) for name, _ in COLUMNS])]
    for level in levels:
        base = _floor(configs, summary, level)
        for cfg in configs:
            s = summary[cfg.name, level]
            ratio_rate = f"{_ratio(s['rate'], base['rate']):.0%}"
            ratio_p50 = f"{_ratio(s['p50'], base['p50']):.2f}x"
            out.append(_row([cfg.name, str(level), f"{s['rate']:.0f}", f"{s['p50']:.3f}",
                             f"{s['p99']:.3f}", ratio_rate, ratio_p50, str(s["errors"])]))
    return "\n".join(out), summary


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def _targets(configs: list[Config], summary: dict[tuple[str, int], Any], high: int,
             low: int) -> str:
    lines = ["targets (against the floor: the best raw relay of this run, per column):"]
    top, bottom = _floor(configs, summary, high), _floor(configs, summary, low)
    for cfg in configs:
        if cfg.kind == "raw":
            continue
        rate = _ratio(summary[cfg.name, high]["rate"], top["rate"])
        p50 = _ratio(summary[cfg.name, low]["p50"], bottom["p50"])
        checks = (
            (f"calls/s @{high} in flight >= {TARGET_THROUGHPUT:.0%} of raw", f"{rate:.0%}",
             rate >= TARGET_THROUGHPUT),  # NaN (no data) compares False: MISS
            (f"p50 @{low} in flight <= {TARGET_P50:g}x raw", f"{p50:.2f}x", p50 <= TARGET_P50),
        )
        for what, got, ok in checks:
            lines.append(f"  {cfg.name:<18}  {what:<36}  {got:>6}  {'PASS' if ok else 'MISS'}")
    return "\n".join(lines)


def _cpu_table(configs: list[Config], levels: list[int]) -> str:
    """Median CPU microseconds per call spent in each of the three processes."""
    out = [f"{'CPU us per call':<18}  {'in-flight':>9}  {'caller':>8}  {'middle':>8}  "
           f"{'agent':>8}  {'total':>8}"]
    for level in levels:
        for cfg in configs:
            rows = [r["cpu_us"] for r in cfg.results.get(level, []) if len(r["cpu_us"]) == 3]
            if not rows:
                continue
            per = [statistics.median(r[i] for r in rows) for i in range(3)]
            out.append(f"{cfg.name:<18}  {level:>9}  {per[0]:>8.0f}  {per[1]:>8.0f}  "
                       f"{per[2]:>8.0f}  {sum(per):>8.0f}")
    return "\n".join(out)


async def parent(args: argparse.Namespace) -> int:
    if args.quick:
        calls = {1: args.calls_1 or 40, 64: args.calls or 200}
        rounds, warmup = args.rounds or 1, args.warmup if args.warmup is not None else 64
    else:
        calls = {1: args.calls_1 or 1000, 64: args.calls or 3000}
        rounds, warmup = args.rounds or 3, args.warmup if args.warmup is not None else 500
    low, high = 1, 64
    levels = [low, high]
    limit = args.batch_timeout
    print(_header())
    print(f"chains: caller -> middle -> agent, 3 processes each; payload ~{len(PAYLOAD['data'])}"
          f" bytes; calls per batch: {calls[low]} @1, {calls[high]} @64; rounds: {rounds} "
          f"(median); warm-up: {warmup} @64 + {max(1, warmup // 5)} @1 per config, then "
          f"{max(1, calls[high] // 20)} before each batch; echo.run declares latency_ms="
          f"{args.latency_ms:g}", flush=True)

    children: list[Child] = []
    with tempfile.TemporaryDirectory(prefix="reach-bench-") as tmp:
        configs = [Config("raw", "raw"), Config("raw-eager", "raw", eager=True),
                   Config("reach-sqlite-file", "reach",
                          "sqlite:///" + os.path.join(tmp, "reach-bench.db")),
                   Config("reach-memory", "reach", "sqlite://")]
        log_dir = tmp
        if args.log_dir:
            log_dir = os.path.abspath(args.log_dir)
            os.makedirs(log_dir, exist_ok=True)
        try:
            started = time.perf_counter()
            await asyncio.gather(*(_start_chain(c, log_dir, children, args.latency_ms)
                                   for c in configs))
            if args.verbose:
                print(f"started {len(children)} processes in "
                      f"{time.perf_counter() - started:.1f}s", flush=True)
            for cfg in configs:  # warm every chain up: JIT-free, but caches, pools, sockets
                await _run(cfg, high, warmup, 0, limit)
                await _run(cfg, low, max(1, warmup // 5), 0, limit)
            for r in range(rounds):
                for level in levels:
                    order = configs[r % len(configs):] + configs[:r % len(configs)]
                    for cfg in order:
                        res = await _run(cfg, level, calls[level],
                                         max(1, calls[high] // 20) if level == high
                                         else max(1, calls[low] // 20), limit)
                        cfg.results.setdefault(level, []).append(res)
                        if args.verbose:
                            print(f"  round {r + 1} {cfg.name:<18} @{level:<3} "
                                  f"{res['rate']:>8.0f}/s p50 {res['p50_ms']:.3f} ms "
                                  f"p99 {res['p99_ms']:.3f} ms errors {res['errors']}",
                                  flush=True)
            table, summary = _table(configs, levels)
            print()
            print(table)
            print()
            print(_targets(configs, summary, high, low))
            print()
            print(_cpu_table(configs, levels))
            problems = [(c.name, lv, r["first_error"]) for c in configs
                        for lv, rs in c.results.items() for r in rs if r["errors"]]
            for name, lv, err in problems[:6]:
                print(f"note: {name} @{lv} had errors, first: {err}")
            if any(r["timed_out"] for c in configs for rs in c.results.values() for r in rs):
                print(f"note: some batches hit the {limit:.0f}s batch limit (partial counts)")
            if args.verbose or args.profile:
                for cfg in [c for c in configs if c.kind == "reach"]:
                    assert cfg.middle is not None
                    print(f"{cfg.name} coordinator: "
                          f"{await cfg.middle.request('stats', 'STATS', 10)}")
            if args.profile:
                await _profile([c for c in configs if c.kind == "reach"], args, calls[high], limit)
            print(f"\ntotal {time.perf_counter() - started:.1f}s", flush=True)
        finally:
            await asyncio.gather(*(c.stop() for c in reversed(children)),
                                 return_exceptions=True)
    return 0


async def _profile(configs: list[Config], args: argparse.Namespace, calls: int,
                   limit: float) -> None:
    """One extra, uncounted 64-in-flight batch per Reach config, its three processes
    profiled (the profiler's overhead slows that batch: its numbers are not comparable)."""
    out_dir = os.path.abspath(args.profile_dir or ".")
    os.makedirs(out_dir, exist_ok=True)
    for cfg in configs:
        procs = {"caller": cfg.caller, "coordinator": cfg.middle, "agent": cfg.agent}
        paths = {}
        for role, child in procs.items():
            assert child is not None
            paths[role] = os.path.join(out_dir, f"profile-{cfg.name}-{role}-{args.profile}.txt")
            await child.request(f"profile-start {args.profile}", "OK", 10)
        res = await _run(cfg, 64, calls, 0, limit)
        for role, child in procs.items():
            assert child is not None
            await child.request(f"profile-stop {paths[role]}", "OK", 60)
        print(f"profiled {cfg.name} @64 ({res['rate']:.0f} calls/s under the profiler):")
        for role, path in paths.items():
            print(f"  {role:<12} {path}")


async def _cancel_on_sigterm(main: Awaitable[int]) -> int:
    """SIGTERM stops the parent like Ctrl-C does: its ``finally`` still stops every child."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await main
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=None,
                    help="calls per batch at 64 in flight (default 3000; --quick 200)")
    ap.add_argument("--calls-1", type=int, default=None,
                    help="calls per batch at 1 in flight (default 1000; --quick 40)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds, the median is reported (default 3; --quick 1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warm-up calls per config at 64 in flight (default 500; --quick 64)")
    ap.add_argument("--batch-timeout", type=float, default=120.0,
                    help="upper bound in seconds for one batch (default 120)")
    ap.add_argument("--latency-ms", type=float, default=50.0,
                    help="latency the Reach echo capability declares (default 50); Reach "
                         "derives its completion timeout from it (x1.2)")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    ap.add_argument("--verbose", "-v", action="store_true", help="per-round numbers, stats")
    ap.add_argument("--profile", choices=("pyinstrument", "cprofile"), default=None,
                    help="after the run, profile the caller, coordinator and agent of each "
                         "Reach chain during one extra 64-in-flight batch (not counted)")
    ap.add_argument("--profile-dir", default=None, help="where profiles go (default .)")
    ap.add_argument("--log-dir", default=None,
                    help="keep each process's stderr here (default: a temp dir, removed)")
    # internal: how the children are started
    ap.add_argument("--role", choices=sorted(ROLES), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--kind", choices=("raw", "reach"), default="raw", help=argparse.SUPPRESS)
    ap.add_argument("--eager", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("calls", "calls_1", "rounds", "warmup"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "warmup" else 1):
            raise SystemExit(f"--{name.replace('_', '-')} must be positive")
    if args.role is not None:
        try:
            asyncio.run(ROLES[args.role](args))
        except KeyboardInterrupt:
            pass
        return 0
    try:
        return asyncio.run(_cancel_on_sigterm(parent(args)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\ninterrupted; all benchmark processes stopped", file=sys.stderr)
        return 130
    except ChildFailed as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
