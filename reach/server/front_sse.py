"""Streams over HTTP: a streaming task's chunks kept for the callers that read them as
server-sent events (``GET /v1/tasks/{id}/stream``).

The gateway hands chunks to sinks as they arrive and keeps none (reach.gateway.book): a
caller that submits with ``POST /v1/tasks`` and then opens the stream would miss the first
ones. So the front door registers a sink at submit, and ``Chunks`` keeps each task's chunks,
bounded per task and in total (``max_frame_bytes`` per task, ``max_outbox_bytes`` in all;
past those the oldest finished tasks' logs go first, and a task over its own bound keeps its
newest chunks: the event ids show the gap). A reader gets what was kept, then follows live.

Event format (docs/http-api.md): ``event: chunk`` with ``id: <seq>`` and the chunk as JSON
``data``; then exactly one ``event: result`` (``{"task_id", "trace_id", "result"}``) or
``event: error`` (a problem object), and the stream ends. ``: keepalive`` comments keep idle
proxies from closing a quiet stream.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from pydantic_core import to_json

from reach.server.front_models import PROBLEM_TYPE

KEEPALIVE = 15.0  # seconds of silence before a keepalive comment


@dataclass(slots=True)
class _Log:
    chunks: deque[tuple[int, bytes]] = field(default_factory=deque)  # (seq, data as JSON)
    size: int = 0
    done: bool = False
    readers: list[Reader] = field(default_factory=list)


class Reader:
    """One stream's view of a task's chunks: what was kept, then what arrives."""

    def __init__(self, kept: list[tuple[int, bytes]], limit: int) -> None:
        self.items: deque[tuple[int, bytes]] = deque(kept)
        self.size = sum(len(d) for _, d in kept)
        self.limit = limit
        self.overflowed = False
        self.wake = asyncio.Event()
        if kept:
            self.wake.set()

    def push(self, seq: int, data: bytes) -> None:
        if self.size + len(data) > self.limit:  # the reader is not keeping up
            self.overflowed = True
        else:
            self.items.append((seq, data))
            self.size += len(data)
        self.wake.set()

    def take(self) -> list[tuple[int, bytes]]:
        out = list(self.items)
        self.items.clear()
        self.size = 0
        self.wake.clear()
        return out


class Chunks:
    """Every kept stream, by task id, bounded in bytes and count."""

    def __init__(self, per_task: int, total: int, max_logs: int = 10_000) -> None:
        self.per_task = per_task
        self.total = total
        self.max_logs = max_logs
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._size = 0

    def sink(self, task_id: str, seq: int, data: Any) -> None:
        """The gateway's chunk sink (``Gateway.accept(request, sink)``)."""
        log = self._logs.get(task_id)
        if log is None:
            log = self._logs[task_id] = _Log()
        if log.chunks and seq <= log.chunks[-1][0]:
            return  # the same chunk through a second sink (a duplicate submit's)
        encoded = to_json(data)
        log.chunks.append((seq, encoded))
        log.size += len(encoded)
        self._size += len(encoded)
        while log.size > self.per_task and len(log.chunks) > 1:
            self._drop_first(log)
        for reader in log.readers:
            reader.push(seq, encoded)
        self._bound()

    def _drop_first(self, log: _Log) -> None:
        _, old = log.chunks.popleft()
        log.size -= len(old)
        self._size -= len(old)

    def _bound(self) -> None:
        if self._size <= self.total and len(self._logs) <= self.max_logs:
            return
        for task_id in [t for t, log in self._logs.items() if log.done and not log.readers]:
            self._forget(task_id)
            if self._size <= self.total and len(self._logs) <= self.max_logs:
                return
        while (self._size > self.total or len(self._logs) > self.max_logs) and self._logs:
            self._forget(next(iter(self._logs)))  # unfinished too, oldest first

    def _forget(self, task_id: str) -> None:
        log = self._logs.pop(task_id)
        self._size -= log.size

    def finished(self, task_id: str) -> None:
        """The task ended: its log may go once no reader holds it."""
        log = self._logs.get(task_id)
        if log is not None:
            log.done = True
            self._bound()

    def follow(self, task_id: str) -> Reader:
        log = self._logs.get(task_id)
        if log is None:
            log = self._logs[task_id] = _Log()
        reader = Reader(list(log.chunks), self.per_task)
        log.readers.append(reader)
        return reader

    def leave(self, task_id: str, reader: Reader) -> None:
        log = self._logs.get(task_id)
        if log is not None and reader in log.readers:
            log.readers.remove(reader)

    def has(self, task_id: str) -> bool:
        return task_id in self._logs

    def kept(self, task_id: str) -> int:
        """How many chunks are kept for a task (for tests and the docs' numbers)."""
        log = self._logs.get(task_id)
        return 0 if log is None else len(log.chunks)


def event(kind: str, data: bytes, event_id: int | None = None) -> bytes:
    head = b"" if event_id is None else b"id: %d\n" % event_id
    return head + b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


async def pump(response: web.StreamResponse, reader: Reader, outcome: asyncio.Future[Any],
               final: Callable[[], bytes], keepalive: float = KEEPALIVE) -> None:
    """Write the reader's chunks as they come, then the final event once ``outcome`` is
    done (whatever it holds: ``final`` says what to send)."""
    def woken(_f: object) -> None:
        reader.wake.set()

    outcome.add_done_callback(woken)
    try:
        while True:
            for seq, data in reader.take():
                await response.write(event("chunk", data, seq))
            if reader.overflowed:
                await response.write(event("error", to_json({
                    "type": PROBLEM_TYPE + "rejected", "title": "Too Many Requests",
                    "status": 429, "code": "rejected", "detail": "this stream's reader fell "
                    "too far behind its chunks; the task goes on: read its result with "
                    "GET /v1/tasks/{id}"})))
                return
            if outcome.done() and not reader.items:
                await response.write(final())
                return
            try:
                await asyncio.wait_for(reader.wake.wait(), keepalive)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
    finally:
        outcome.remove_done_callback(woken)
