"""An outbound queue per websocket (the coordinator's sessions and both SDKs): post frames from
anywhere without awaiting, sent in order.

Results are pushed from completion callbacks, which cannot await; the outbox turns a ``post`` into
an ordered send by one writer task that the connection owns and stops.

A peer that stops reading must not make us buffer without end: with a ``limit``, once more than
that many bytes wait unsent the connection is closed (1008, "slow reader") and what was queued
is dropped. Nothing acknowledged is lost by that: tasks are durable, and a caller that
reconnects asks for its outcomes again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.protocol import CLIENT, State

from reach.wire.framing import frame

log = logging.getLogger("reach.outbox")
SLOW_READER = 1008  # the close code for a peer whose unread frames passed the limit


class Outbox:
    EAGER_LIMIT = 64 * 1024  # bytes already buffered before frames wait for the writer task
    ABORT_AFTER = 1.0  # seconds a slow reader has to read its way to the close frame

    def __init__(self, ws: Any, name: str = "outbox", limit: int | None = None) -> None:
        self.ws = ws
        self.name = name
        self.limit = limit
        self._queue: deque[str] = deque()
        self._queued = 0  # characters of text waiting in ``_queue`` (about its bytes)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._pump(), name=name)
        self.closed = False
        self.overflowed = False
        self._masked = ws.protocol.side is CLIENT  # a client masks what it sends

    def post(self, text: str) -> bool:
        """Send one frame now if the socket can take it, else queue it; False once closed.

        Writing at once (as a relay does) lets the next process start on the frame while this
        one goes on; frames that meet a busy socket are queued and written together."""
        if self.closed:
            return False
        if not self._queue and self._writable():
            # Framed here (reach.wire.framing): the frame websockets' send_text would build.
            self.ws.transport.write(frame(text.encode(), self._masked))
            return True
        self._queue.append(text)
        self._queued += len(text)
        if self.limit is not None and self._queued > self.limit:
            self._overflow()
            return False
        self._wake.set()
        return True

    def _overflow(self) -> None:
        """The peer reads slower than we write: drop what waits and close the connection."""
        unsent = self._queued
        log.warning("%s: closing a slow reader's connection: %d bytes unsent, over the "
                    "%d-byte limit (max_outbox_bytes)", self.name, unsent, self.limit)
        self.closed = self.overflowed = True
        self._queue.clear()
        self._queued = 0
        self._task.cancel()
        # Not ``ws.close()``: its closing handshake waits for the write buffer to drain, which
        # a peer that does not read never lets happen. The close frame goes behind what is
        # already buffered; a peer that reads its way to it answers it and the connection ends
        # as usual; one that does not is dropped after ABORT_AFTER (connection_lost then ends
        # the session's reader). Not ``transport.close()`` either: on Python 3.11 a transport
        # closed with data still buffered breaks the ``abort()`` that websockets' own close
        # calls later (AttributeError once the buffer has drained).
        ws = self.ws
        with contextlib.suppress(Exception):
            ws.protocol.send_close(SLOW_READER, f"slow reader: {unsent} bytes unsent")
            ws.transport.write(b"".join(ws.protocol.data_to_send()))
        asyncio.get_running_loop().call_later(self.ABORT_AFTER, self._abort)

    def _abort(self) -> None:
        """Drop the connection of a slow reader that did not get through to the close frame."""
        if not self.ws.connection_lost_waiter.done():
            self.ws.transport.abort()

    def _writable(self) -> bool:
        ws = self.ws
        transport = getattr(ws, "transport", None)
        return (transport is not None and ws.protocol.state is State.OPEN
                and not transport.is_closing()
                and transport.get_write_buffer_size() < self.EAGER_LIMIT)

    async def _pump(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    if len(self._queue) == 1:
                        text = self._queue.popleft()
                        self._queued -= len(text)
                        await self.ws.send(text)
                    else:
                        await self._send_batch()
        except ConnectionClosed:
            self.closed = True

    async def _send_batch(self) -> None:
        """Frame every queued message and write them with one syscall instead of one each.

        Uses the sans-I/O protocol the way websockets' own ``send`` does (``send_context`` checks
        the state and applies flow control on exit); only the write is coalesced.
        """
        batch = list(self._queue)
        self._queue.clear()
        self._queued = 0
        ws = self.ws
        async with ws.send_context():
            for text in batch:
                ws.protocol.send_text(text.encode())
            data = [chunk for chunk in ws.protocol.data_to_send() if chunk]
            ws.transport.write(b"".join(data))

    async def aclose(self) -> None:
        """Stop the writer; frames still queued are dropped with the connection."""
        self.closed = True
        self._task.cancel()
        # Waited for, not awaited: the caller then resumes as usual, not by the writer's
        # CancelledError thrown up its await chain, which Python 3.11's tracer does not follow
        # (CPython gh-106749: under coverage, the caller's lines after this went unmeasured).
        # A caller cancelled meanwhile still gets its own CancelledError from the wait.
        await asyncio.wait((self._task,))
        if not self._task.cancelled():
            self._task.result()  # a writer that failed (not by a lost connection) says so

