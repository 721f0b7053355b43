"""``Waiters``: what a caller connection waits for, and the frames from the coordinator that
settle it.

Three kinds of wait, each keyed by the request ``id`` the client chose (docs/protocol.md §4):

    _requests   an answer to one request: ``accepted`` for a submit, ``task`` for a status
    _outcomes   a task's outcome (``result``, or ``error`` with its ``task_id``), with the
                task's id once it is known: what is asked for again after a reconnect
    _streams    the chunks of a streaming task, then its end

``_submits`` keeps each submit frame until the coordinator has answered it, to be sent again,
under the same idempotency key, on the next connection (the same coordinator, or another).
The connection itself (dialling, reading, reconnecting) is the ``Client``'s, in client.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from reach.core.resilience import Pacer
from reach.errors import ProtocolError, ReachError, Rejected, from_wire
from reach.sdk.fallback import outcome_of, unwrap
from reach.sdk.streams import End
from reach.wire import protocol as p

log = logging.getLogger("reach.client")


class Waiters:
    """The client's waits, settled by the frames its connection reads (``_on_frame``)."""

    def __init__(self) -> None:
        self._requests: dict[int, asyncio.Future[Any]] = {}
        # Submits not yet acknowledged, kept to be sent again (same key) after a reconnect.
        self._submits: dict[int, str] = {}
        self._pacer = Pacer()  # slows submits down after `rejected` (back-pressure)
        self._outcomes: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._streams: dict[int, asyncio.Queue[Any]] = {}

    def _lost(self, exc: ReachError) -> None:
        """The connection is gone: a request that is not a submit fails (``exc``); submits
        and outcomes wait for the next connection (``_asks_again``)."""
        for req_id, fut in list(self._requests.items()):
            if req_id not in self._submits and not fut.done():
                fut.set_exception(exc)
                del self._requests[req_id]

    def _asks_again(self) -> list[str | p.Frame]:
        """What a new connection must be told: submits not acknowledged go again under the
        same idempotency key (the coordinator answers with the first task if it had committed
        it); for accepted tasks, the outcome is asked for again by id: they were durable."""
        again: list[str | p.Frame] = list(self._submits.values())
        again.extend(p.Result(task_id=task_id, id=req_id)
                     for req_id, (task_id, _fut) in self._outcomes.items()
                     if task_id and req_id not in self._submits)
        return again

    def _fail_all(self, exc: ReachError) -> None:
        for fut in self._requests.values():
            if not fut.done():
                fut.set_exception(exc)
        for _tid, fut in self._outcomes.values():
            if not fut.done():
                fut.set_exception(exc)
        for queue in self._streams.values():
            queue.put_nowait(exc)
        self._requests.clear()
        self._submits.clear()
        self._outcomes.clear()

    def _on_frame(self, raw: str | bytes) -> None:
        try:
            frame = p.parse(raw)
        except ProtocolError:
            log.warning("ignoring a malformed frame from the coordinator")
            return
        kind = frame.type
        if kind in ("accepted", "result", "error") and frame.id is not None:
            self._submits.pop(frame.id, None)
        if kind in ("accepted", "result") and self._pacer.delay:
            self._pacer.accepted()  # taken again: ease off the back-pressure wait
        if kind == "accepted":
            entry = self._outcomes.get(frame.id)
            if entry is not None:
                self._outcomes[frame.id] = (frame.task_id, entry[1])
        if kind in ("accepted", "task"):
            fut = self._requests.pop(frame.id, None)
            if fut is not None and not fut.done():
                fut.set_result(frame)
        elif kind == "result":
            self._accept_with_outcome(frame)
            self._settle(frame.id, outcome_of(frame), None)
        elif kind == "error":
            err = from_wire(frame.error.model_dump())
            if isinstance(err, Rejected):
                self._pacer.rejected(err.level, asyncio.get_running_loop().time())
            if frame.trace_id is not None:  # the task was accepted, and failed
                self._accept_with_outcome(frame)
                self._settle(frame.id, None, err)
                return
            fut = self._requests.pop(frame.id, None) if frame.id is not None else None
            if fut is not None:
                if not fut.done():
                    fut.set_exception(err)
            elif frame.id is not None:
                self._settle(frame.id, None, err)
            else:
                log.warning("coordinator reports: %s", err)
        elif kind == "chunk":
            queue = self._streams.get(frame.id or -1)
            if queue is not None:
                queue.put_nowait(frame.data)

    def _accept_with_outcome(self, frame: Any) -> None:
        """An outcome frame carrying ``trace_id`` also stands for the submit's acceptance."""
        if frame.trace_id is None or frame.id is None:
            return
        entry = self._outcomes.get(frame.id)
        if entry is not None:
            self._outcomes[frame.id] = (frame.task_id, entry[1])
        fut = self._requests.pop(frame.id, None)
        if fut is not None and not fut.done():
            fut.set_result(p.Accepted.model_construct(id=frame.id, task_id=frame.task_id,
                                                      trace_id=frame.trace_id))

    def _settle(self, req_id: int | None, result: Any, err: ReachError | None) -> None:
        entry = self._outcomes.pop(req_id or -1, None)
        queue = self._streams.get(req_id or -1)
        if queue is not None:
            queue.put_nowait(err if err is not None else End(unwrap(result)[0]))
        if entry is None or entry[1].done():
            return
        if err is not None:
            entry[1].set_exception(err)
        else:
            entry[1].set_result(result)
