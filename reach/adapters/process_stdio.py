"""The long-lived process of a stdio ``ProcessAgent``: started, read, restarted, ended.

One process speaks JSON lines (docs/adapters.md, "stdio protocol"): Reach writes one request
per line on its stdin, ``{"id": 7, "capability": ..., "params": ..., <context>}``, and reads
replies from its stdout, ``{"id": 7, "result": ...}`` or ``{"id": 7, "error": {"message": ...,
"answer": false}}``; ``{"id": 7, "chunk": ...}`` lines before the reply stream a result. Calls
are multiplexed by id, so the process may answer them in any order. A call the gateway gives
up on is sent ``{"id": 7, "cancel": true}`` and forgotten; a late reply to it is dropped.

The supervisor owns one task: it starts the process, reads its lines until its stdout ends,
fails every call still in flight with the reason (exit code, stderr's tail), ends the process
group and starts it again after a backoff (``reach.core.backoff``; the count of restarts in a
row resets once a new process has answered a call). A line that is not JSON is logged
(throttled) and skipped: tools print banners and warnings, and one stray line must not fail
every call in flight. A line past the bound cannot be read at all, so it ends the process
(its in-flight calls fault, saying so) and a fresh one is started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import subprocess
import time
from collections.abc import Callable
from typing import Any

from reach.adapters.base import AdapterFault, Undelivered
from reach.adapters.process_call import TAIL, end_group, release
from reach.core.backoff import Backoff

log = logging.getLogger("reach.adapters.process")
DRAIN_ABOVE = 1 << 20  # wait for the pipe only once this much is queued for the process
GARBAGE_LOG_EVERY = 10.0  # seconds between two warnings about lines that are not JSON
EXCERPT = 200


class _Call:
    __slots__ = ("future", "on_chunk")

    def __init__(self, future: asyncio.Future[dict[str, Any]],
                 on_chunk: Callable[[Any], None] | None) -> None:
        self.future = future
        self.on_chunk = on_chunk


class Supervisor:
    """Keeps one JSON-lines process running for its agent and carries calls over it."""

    def __init__(self, agent: str, program: str, args: list[str], *, env: dict[str, str],
                 cwd: str | None, max_line: int, grace: float, backoff: Backoff,
                 popen: dict[str, Any] | None = None) -> None:
        self.agent = agent
        self.popen = dict(popen or {})  # more start keywords (user/group: process_user)
        self.program = program
        self.args = args
        self.env = env
        self.cwd = cwd
        self.max_line = max_line
        self.grace = grace
        self.backoff = backoff
        self.rng = random.Random()
        self.proc: asyncio.subprocess.Process | None = None  # None while (re)starting
        self.restarts = 0  # processes started after the first
        self.garbage = 0  # lines that were not JSON replies
        self.last_error = ""
        self._writer: asyncio.StreamWriter | None = None
        self._calls: dict[int, _Call] = {}
        self._out: list[bytes] = []  # lines queued for the next write
        self._ids = 0
        self._crashes = 0  # restarts in a row without an answered call in between
        self._stderr = bytearray()
        self._started = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._garbage_logged = -GARBAGE_LOG_EVERY
        self._garbage_quiet = 0

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the process (and its supervising task); returns once the first start was
        tried, so a health check made next sees whether it runs."""
        self._closing = False
        self._started.clear()
        self._task = asyncio.get_running_loop().create_task(
            self._supervise(), name=f"reach-process-{self.agent}")
        await self._started.wait()

    async def stop(self) -> None:
        """End the process: its stdin is closed (a tool should exit at end of input), then
        after the grace its group is ended; calls still in flight fault."""
        self._closing = True
        proc, writer = self.proc, self._writer
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.close()
        if proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), self.grace)
            await end_group(proc, self.grace)
            release(proc)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._fail_all("the agent was closed")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    # ------------------------------------------------------------ calls

    async def call(self, request: dict[str, Any],
                   on_chunk: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """Send one request line and wait for its reply line (the parsed object). Raises
        ``Undelivered`` when no process is running to take it, ``AdapterFault`` when the
        process ended before answering."""
        writer = self._writer
        if writer is None or writer.is_closing() or not self.running:
            raise Undelivered(f"the process of {self.agent!r} is not running (it is being "
                              f"restarted){': ' + self.last_error if self.last_error else ''}")
        self._ids += 1
        rid = request["id"] = self._ids
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[rid] = _Call(future, on_chunk)
        try:
            self._send(json.dumps(request, separators=(",", ":")).encode() + b"\n")
            if writer.transport.get_write_buffer_size() > DRAIN_ABOVE:
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                    await writer.drain()  # a dead process fails the call below, with reason
            return await future
        except asyncio.CancelledError:
            if self._calls.pop(rid, None) is not None and not writer.is_closing():
                self._send(b'{"id":%d,"cancel":true}\n' % rid)
            elif future.done() and not future.cancelled():
                future.exception()  # failed as it was given up on: nobody else will look
            raise
        finally:
            self._calls.pop(rid, None)

    def _send(self, line: bytes) -> None:
        # The lines of one loop iteration go out in one write: at 32 calls in flight, a
        # write system call per call was the adapter's largest cost (bench/adapters_stdio.py).
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(line)

    def _flush(self) -> None:
        data = b"".join(self._out)
        self._out.clear()
        writer = self._writer
        if writer is not None and not writer.is_closing():
            writer.write(data)  # else the process is gone: its calls are failed with reason

    # ------------------------------------------------------------ the supervising task

    async def _supervise(self) -> None:
        while True:  # until stop() sets _closing (seen below) or cancels this task
            began = time.monotonic()
            try:
                proc = await asyncio.create_subprocess_exec(
                    self.program, *self.args, stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                    env=self.env, cwd=self.cwd, limit=self.max_line, start_new_session=True,
                    **self.popen)
            except (OSError, subprocess.SubprocessError) as exc:
                self.last_error = (f"could not start {self.program!r}: "
                                   f"{getattr(exc, 'strerror', None) or exc}")
                log.warning("agent %s: %s", self.agent, self.last_error)
                self._started.set()
            else:
                await self._serve(proc)
            if self._closing:
                break
            delay = self.backoff.delay(self._crashes, self.rng)
            self._crashes += 1
            log.warning("agent %s: process ended after %.1f s (%s); restarting in %.2f s",
                        self.agent, time.monotonic() - began, self.last_error, delay)
            await asyncio.sleep(delay)
            self.restarts += 1

    async def _serve(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
        self._stderr.clear()
        self.proc, self._writer = proc, proc.stdin
        self._started.set()
        stderr = asyncio.ensure_future(self._read_stderr(proc.stderr))
        try:
            why = await self._read(proc.stdout)
        finally:
            # From here on new calls are refused (undelivered): none can join the calls
            # failed below.
            self._writer = None
            try:
                await end_group(proc, self.grace)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stderr), self.grace)
            finally:
                stderr.cancel()
                release(proc)
                self.proc = None
        await asyncio.gather(stderr, return_exceptions=True)
        tail = bytes(self._stderr[-TAIL:]).decode("utf-8", "replace").strip()
        self.last_error = f"{why}, exit code {proc.returncode}" + (
            f"; stderr (last {TAIL} bytes): {tail}" if tail else "")
        self._fail_all(f"the process of {self.agent!r} {self.last_error}; it is restarted")

    async def _read(self, stdout: asyncio.StreamReader) -> str:
        """Read reply lines until stdout ends; returns why it ended."""
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if exc.partial.strip():
                    self._line(exc.partial)
                return "ended its output"
            except asyncio.LimitOverrunError:
                return f"printed a line longer than {self.max_line} bytes on stdout"
            self._line(line)

    def _line(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
            rid = msg["id"]
            call = self._calls.get(rid)
        except (ValueError, TypeError, KeyError):
            self._stray(line)
            return
        if call is None:
            return  # a reply to a call given up on (cancelled, timed out)
        if "chunk" in msg and "result" not in msg and "error" not in msg:
            if call.on_chunk is not None:
                call.on_chunk(msg["chunk"])
            return
        del self._calls[rid]
        if not call.future.done():
            call.future.set_result(msg)
        self._crashes = 0

    def _stray(self, line: bytes) -> None:
        self.garbage += 1
        now = time.monotonic()
        if now - self._garbage_logged < GARBAGE_LOG_EVERY:
            self._garbage_quiet += 1
            return
        more = f" ({self._garbage_quiet} more since the last warning)" \
            if self._garbage_quiet else ""
        log.warning("agent %s: skipped a stdout line that is not a JSON reply with an id%s: "
                    "%r", self.agent, more, line[:EXCERPT])
        self._garbage_logged, self._garbage_quiet = now, 0

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(1 << 16):
            self._stderr += chunk
            if len(self._stderr) > TAIL:
                del self._stderr[:-TAIL]

    def _fail_all(self, message: str) -> None:
        calls, self._calls = self._calls, {}
        for call in calls.values():
            if not call.future.done():
                call.future.set_exception(AdapterFault(message))
