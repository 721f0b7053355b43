"""Shared plumbing of the side-by-side benchmarks: children driven over stdin, batches of calls
with a fixed number in flight, and the parent's handle on every process it started.

A benchmark process (a *child*) is this directory's ``relay.py --role ROLE`` (or another script
of it, such as the Celery worker in ``celery_app.py``). It reads one command per line on stdin
and answers on stdout with lines starting ``BENCH``; every child understands ``cpu`` (its CPU
seconds so far), ``profile-start KIND`` / ``profile-stop PATH`` and ``quit``. A child whose
stdin closes exits, so the parent dying (even by SIGKILL) leaves no orphan behind; the parent
also terminates and then kills every child in ``finally`` (``Launcher.stop``).

A *caller* child runs batches: ``run INFLIGHT CALLS LIMIT_S BUDGET_S`` makes ``CALLS`` calls
with ``INFLIGHT`` of them outstanding at any time (starting none after ``BUDGET_S``) and answers
``RESULT {json}`` (calls/s, p50, p99, errors). Every chain — the raw floor, Reach, each
peer — is measured by this same code, so the rows of one table differ only in what sits
behind ``call()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

PAYLOAD: dict[str, Any] = {"data": "x" * 200}  # ~200 bytes, the same for every chain
TAG = "BENCH"
STARTUP_TIMEOUT = 60.0
STOP_GRACE = 5.0
MAX_STRAY_LINES = 10_000
HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "relay.py"  # children are this script with --role


# =====================================================================================
# child side
# =====================================================================================


def say(*parts: Any) -> None:
    """One protocol line to the parent."""
    sys.stdout.write(" ".join([TAG, *(str(p) for p in parts)]) + "\n")
    sys.stdout.flush()


def stdin_lines(on_line: Callable[[str], None], on_close: Callable[[], None]) -> None:
    """Read stdin on a daemon thread: ``on_line`` per line, ``on_close`` at EOF. Both are
    called on that thread; the caller hands them over to its loop (or acts at once)."""

    def read() -> None:
        try:
            for line in sys.stdin:
                on_line(line.strip())
        except (OSError, ValueError):
            pass
        on_close()

    threading.Thread(target=read, name="bench-stdin", daemon=True).start()


def _commands() -> tuple[asyncio.Queue[str], asyncio.Event]:
    """Lines from stdin as a queue, and an event set when stdin closes or on SIGINT/SIGTERM."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str] = asyncio.Queue()
    stop = asyncio.Event()

    def call(fn: Callable[..., Any], *a: Any) -> None:
        with contextlib.suppress(RuntimeError):  # loop already closed: we are exiting anyway
            loop.call_soon_threadsafe(fn, *a)

    stdin_lines(lambda line: call(queue.put_nowait, line), lambda: call(stop.set))
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return queue, stop


async def serve_commands(handle: Callable[[list[str]], Awaitable[None]] | None = None) -> None:
    """Answer commands until stdin closes, a signal comes, or ``quit``; a stop also cancels
    the command in progress (a batch against a dead coordinator must not hold us)."""
    queue, stop = _commands()
    loop = asyncio.get_running_loop()
    stopping = loop.create_task(stop.wait())
    profiler: Profiler | None = None

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
                say("CPU", time.process_time())
                continue
            if words[0] == "profile-start":  # profile-start pyinstrument|cprofile
                profiler = Profiler(words[1])
                profiler.start()
                say("OK")
                continue
            if words[0] == "profile-stop" and profiler is not None:  # profile-stop PATH
                profiler.stop(words[1])
                profiler = None
                say("OK", words[1])
                continue
            if handle is None:
                say("ERR", "unknown-command", words[0])
                continue
            ok, work = await until_stop(handle(words))
            if not ok:
                return
            if work.exception() is not None:  # report it, keep serving: the parent decides
                exc = work.exception()
                say("ERR", type(exc).__name__, json.dumps(str(exc)))
    finally:
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)


class Profiler:
    """pyinstrument or cProfile over a child's event-loop thread, on command. Both measure wall
    time: on a busy 2-core machine a process also waits for a core inside whatever call it is
    in (often a send that woke its peer), and that wait is charged to the call."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "pyinstrument":
            from pyinstrument import Profiler as Pyinstrument
            self._prof: Any = Pyinstrument(interval=0.0005, async_mode="disabled")
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
            self._prof.dump_stats(path.removesuffix(".txt") + ".pstats")  # for pstats/snakeviz
            buf = io.StringIO()
            stats = pstats.Stats(self._prof, stream=buf)
            stats.sort_stats("tottime").print_stats(45)
            stats.sort_stats("cumulative").print_stats(45)
            text = buf.getvalue()
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"# process CPU time while profiled (all threads): {cpu:.3f} s\n")
            fh.write(text)


# -------------------------------------------------------------------- callers and batches


class Caller(Protocol):
    """What a caller child drives: one ``call()`` is one request and its answer."""

    async def open(self, url: str) -> None: ...
    async def prepare(self, inflight: int) -> None: ...
    async def call(self) -> Any: ...
    async def close(self) -> None: ...


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


async def batch(call: Callable[[], Awaitable[Any]], inflight: int, calls: int,
                limit: float, budget: float = math.inf) -> dict[str, Any]:
    """``calls`` calls with ``inflight`` of them outstanding at any time, bounded by ``limit`` s
    (calls still out then are cut off: ``timed_out``). After ``budget`` s no new call starts,
    so a slow peer gives fewer calls in the same time rather than stretching the run; those
    in flight finish and count. A call counts when it returns ``PAYLOAD`` back (an echo)."""
    latencies: list[float] = []
    errors: list[str] = []
    todo = iter(range(calls))  # shared by the workers: each call is taken exactly once
    clock = time.perf_counter
    stop_at = clock() + budget

    async def worker() -> None:
        for _ in todo:
            t0 = clock()
            if t0 > stop_at:
                return
            try:
                result = await call()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(clock() - t0)
            if result != PAYLOAD:
                errors.append(f"wrong echo: {str(result)[:80]}")

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
            "p50_ms": percentile(latencies, 0.50) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000}


async def serve_caller(caller: Caller, url: str) -> None:
    """The caller role: open, say READY, answer ``run`` commands with batches, close."""
    await caller.open(url)

    async def handle(words: list[str]) -> None:
        if words[0] != "run":  # run INFLIGHT CALLS LIMIT_S BUDGET_S
            say("ERR", "unknown-command", words[0])
            return
        inflight = int(words[1])
        await caller.prepare(inflight)
        result = await batch(caller.call, inflight, int(words[2]), float(words[3]),
                             float(words[4]))
        say("RESULT", json.dumps(result))

    try:
        say("READY", url)
        await serve_commands(handle)
    finally:
        await caller.close()


# =====================================================================================
# parent side
# =====================================================================================


class ChildFailed(RuntimeError):
    """A child exited, said ERR, or did not answer in time."""


class Skip(Exception):  # noqa: N818 - a verdict, not an error
    """A chain cannot run on this machine (a service is not reachable, a package is missing):
    its row is left out and the reason printed, never faked."""


class Child:
    """One subprocess, driven over stdin, answering ``BENCH ...`` on stdout."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log_path: str) -> None:
        self.name = name
        self.proc = proc
        self.log_path = log_path

    @classmethod
    async def spawn(cls, name: str, argv: list[str], log_dir: str) -> Child:
        """``python ARGV...`` with its stderr in ``LOG_DIR/NAME.log``."""
        log_path = os.path.join(log_dir, f"{name}.log")
        with open(log_path, "wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *argv,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return cls(name, proc, log_path)

    def log_tail(self, lines: int = 15) -> str:
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
                                          f"; its stderr ends with:\n{self.log_tail()}")
                    parts = raw.decode(errors="replace").rstrip("\n").split(" ", 2)
                    if parts[0] != TAG or len(parts) < 2:
                        continue
                    if parts[1] == "ERR":
                        raise ChildFailed(f"{self.name}: {' '.join(parts[2:])}")
                    if parts[1] == word:
                        return parts[2] if len(parts) > 2 else ""
        except TimeoutError:
            raise ChildFailed(f"{self.name} did not answer {word!r} within {timeout:.0f}s; "
                              f"its stderr ends with:\n{self.log_tail()}") from None
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


def role(name: str, *args: str) -> list[str]:
    """The argv of a child that runs ``relay.py --role NAME ARGS...``."""
    return [str(SCRIPT), "--role", name, *args]


class Launcher:
    """Starts children with their logs in one directory and keeps them all, so that one
    ``stop()`` in the parent's ``finally`` ends every process the run started. ``work_dir``
    is the run's scratch directory (SQLite files), removed after the run."""

    def __init__(self, log_dir: str, work_dir: str) -> None:
        self.log_dir = log_dir
        self.work_dir = work_dir
        self.children: list[Child] = []

    async def start(self, name: str, argv: list[str],
                    timeout: float = STARTUP_TIMEOUT) -> tuple[Child, str]:
        """Spawn a child and wait for its ``READY`` line; returns it and what READY said."""
        child = await Child.spawn(name, argv, self.log_dir)
        self.children.append(child)
        return child, (await child.expect("READY", timeout)).strip()

    async def stop(self, children: list[Child] | None = None) -> None:
        """Stop ``children`` (default: all), the last started first."""
        chosen = self.children if children is None else children
        await asyncio.gather(*(c.stop() for c in reversed(chosen)), return_exceptions=True)
        self.children = [c for c in self.children if c not in chosen]


class ServiceCpu:
    """CPU seconds of a service this benchmark did not start (redis-server, nats-server),
    found by process name; ``None`` when it cannot be seen (then the column shows ``-``)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self._proc: Any = None
        try:
            import psutil
            for proc in psutil.process_iter(["name"]):
                if proc.info["name"] in names:
                    self._proc = proc
                    break
        except Exception:  # psutil missing or /proc unreadable: report nothing, not zero
            self._proc = None

    def seconds(self) -> float | None:
        if self._proc is None:
            return None
        try:
            t = self._proc.cpu_times()
            return float(t.user + t.system)
        except Exception:
            return None


@dataclass
class Chain:
    """One row of the table: a name, how to start its processes, and its measured batches.

    ``caller`` runs the batches; ``middle`` and ``agent`` are the processes behind it (either
    may be None, e.g. an HTTP server has no middle); ``service`` measures an external middle
    such as Redis. ``group`` is "floor", "reach" or "peer"; ``setup`` says in words how the
    chain is built, for the notes under the table."""

    name: str
    group: str
    launch: Callable[[Chain, Launcher], Awaitable[None]]
    setup: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    caller: Child | None = None
    middle: Child | None = None
    agent: Child | None = None
    service: ServiceCpu | None = None
    cleanup: Callable[[], Awaitable[None]] | None = None  # after its processes stop
    results: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def children(self) -> list[Child]:
        return [c for c in (self.caller, self.middle, self.agent) if c is not None]

    async def cpu(self) -> list[float | None]:
        """CPU seconds so far of caller, middle and agent (None where not measurable)."""
        async def one(child: Child | None) -> float | None:
            return None if child is None else float(await child.request("cpu", "CPU", 10))
        middle = (self.service.seconds() if self.service is not None and self.middle is None
                  else await one(self.middle))
        return [await one(self.caller), middle, await one(self.agent)]

    async def guarded(self, request: Awaitable[str]) -> str:
        """``request`` to the caller, abandoned at once if the middle or agent dies."""
        work = asyncio.ensure_future(request)
        others = [c for c in (self.middle, self.agent) if c is not None]
        deaths = {asyncio.ensure_future(c.proc.wait()): c for c in others}
        try:
            await asyncio.wait({work, *deaths}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                return work.result()
            dead = next(c for t, c in deaths.items() if t.done())
            raise ChildFailed(f"{dead.name} exited (code {dead.proc.returncode}) during a "
                              f"batch; its stderr ends with:\n{dead.log_tail()}")
        finally:
            for t in (work, *deaths):
                t.cancel()
            await asyncio.gather(work, *deaths, return_exceptions=True)

    async def run(self, inflight: int, calls: int, warmup: int, limit: float,
                  budget: float = math.inf) -> dict[str, Any]:
        """A warm-up batch (not counted), then the measured batch with each process's CPU;
        both stop starting calls after ``budget`` seconds (see ``batch``)."""
        caller = self.caller
        assert caller is not None
        if warmup:
            await self.guarded(caller.request(f"run {inflight} {warmup} {limit} {budget}",
                                              "RESULT", limit + 30))
        before = await self.cpu()
        result: dict[str, Any] = json.loads(await self.guarded(
            caller.request(f"run {inflight} {calls} {limit} {budget}", "RESULT", limit + 30)))
        after = await self.cpu()
        # CPU microseconds per successful call: caller, middle, agent (None: not measured)
        result["cpu_us"] = [None if a is None or b is None else (a - b) * 1e6 / max(1, result["ok"])
                            for a, b in zip(after, before, strict=True)]
        return result
