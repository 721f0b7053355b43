"""What every websocket session shares: an outbox, a frame reader, and how a peer is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from reach.errors import InvalidParams, ProtocolError, ReachError
from reach.server.services import Services
from reach.wire import protocol as p
from reach.wire.inbound import YIELD_EVERY, Inbound
from reach.wire.outbox import Outbox

POLICY_VIOLATION = 1008
_Error = p.unchecked(p.Error)
_WireError = p.unchecked(p.WireError)


def wire_error(error: dict[str, Any]) -> p.WireError:
    """An error object (``ReachError.to_wire()`` or a task's stored error) as the model."""
    return _WireError(**error)


def error_frame(err: ReachError, *, id: int | None = None, task_id: str | None = None,
                attempt: int = 0) -> str:
    return p.dump(_Error(id=id, task_id=task_id, attempt=attempt,
                         error=wire_error(err.to_wire())))


async def refuse(ws: ServerConnection, err: ReachError) -> None:
    try:
        await ws.send(error_frame(err))
        # A close reason may be 123 bytes: cut by bytes, not characters (non-ASCII text
        # cut at 120 characters made the close itself fail, and the connection end 1011).
        await ws.close(POLICY_VIOLATION,
                       err.message.encode()[:120].decode("utf-8", errors="ignore"))
    except ConnectionClosed:
        pass


class LoopLag:
    """How late the event loop runs a timer: a sign it has more work than it can do at once
    (then the heaviest callers are read more slowly, see ``CallerSession._backlog``). This
    is the real loop's lag, not the coordinator's clock: a fake clock has no loop to lag.

    It ticks every ``period`` for as long as it is watched, so a tick is two plain loop
    callbacks (a timer, then one hop through the ready queue), not a task sleeping: no
    future, no coroutine step and no new timer object per tick beyond the loop's own."""

    def __init__(self) -> None:
        self.lag = 0.0  # seconds

    async def watch(self, period: float = 0.005) -> None:
        """Keep ``lag`` until cancelled."""
        loop = asyncio.get_running_loop()
        handle: asyncio.Handle | None = None

        def fired(due: float) -> None:
            nonlocal handle
            # One hop through the ready queue, as a sleeping task's wake-up took: the lag
            # counts the loop turn that runs due callbacks, as it always did.
            handle = loop.call_soon(measure, due)

        def measure(due: float) -> None:
            nonlocal handle
            now = loop.time()
            late = now - due
            # Up at once, down gently: one quiet turn does not end a flood.
            self.lag = late if late > self.lag else self.lag * 0.5 + late * 0.5
            handle = loop.call_at(now + period, fired, now + period)

        handle = loop.call_at(loop.time() + period, fired, loop.time() + period)
        try:
            await loop.create_future()  # never set: the watch ends by cancellation
        finally:
            handle.cancel()


class Session:
    """One connection's session: its frames in (``_frames``) and out (``out``)."""

    def __init__(self, services: Services, ws: ServerConnection) -> None:
        self.services = services
        self.ws = ws
        peer = ":".join(map(str, ws.remote_address[:2])) if ws.remote_address else "?"
        self.out = Outbox(ws, name=f"reach-session-out {peer}",
                          limit=services.settings.max_outbox_bytes)

    async def _frames(self, on_frame: Callable[[Any], None],
                      parse: Callable[[str | bytes], Any] = p.parse) -> None:
        """Read frames until the socket closes; a bad one is answered, not fatal. On an
        ``Inbound`` connection most frames are handed over as they arrive (``direct``); this
        loop reads what queued meanwhile, and holds off (``_backlog``) before the next."""
        ws = self.ws
        inbound = ws if isinstance(ws, Inbound) else None
        stop: Callable[[], None] = inbound.disarm if inbound is not None else lambda: None
        failed: list[Exception] = []

        def handle(raw: str | bytes) -> None:
            try:
                frame = parse(raw)
            except (ProtocolError, InvalidParams) as exc:
                # Echo the request id when there is one: the caller is waiting on it.
                self.out.post(error_frame(exc, id=p.request_id(raw)))
                return
            try:
                on_frame(frame)
            except ReachError as exc:
                self.out.post(error_frame(exc, id=getattr(frame, "id", None)))

        def direct(raw: bytes) -> None:
            try:
                handle(raw)
            except Exception as exc:  # a bug: it ends the session, as it would in the loop
                failed.append(exc)
                stop()
                return
            if self._held() and self._waits():
                stop()

        read = 0
        try:
            while True:
                if inbound is not None and not inbound.pending:
                    if self._held() and self._waits():
                        await self._backlog()
                        continue  # (frames that came meanwhile queued: they go first)
                    await inbound.arm(direct)
                    if failed:
                        raise failed[0]
                    if not inbound.pending and ws.protocol.state is State.OPEN:
                        continue
                raw = await ws.recv()
                read += 1
                if not read % YIELD_EVERY:
                    # Frames already buffered are read without a pause: one peer's burst
                    # must not hold the loop from every other connection.
                    await asyncio.sleep(0)
                if self._held():  # (since a frame handed over before this one)
                    await self._backlog()
                handle(raw)
                if self._held():
                    await self._backlog()
        except ConnectionClosed:
            pass
        finally:
            if inbound is not None:
                inbound.disarm()

    def _held(self) -> bool:
        """Whether ``_backlog`` may have to wait (a cheap test made after every frame)."""
        return False

    def _waits(self) -> bool:
        """Whether ``_backlog`` would wait now (asked only when ``_held``): a frame handed
        over directly stops the handing over only then (``Inbound.disarm``)."""
        return True

    async def _backlog(self) -> None:
        """Before the next frame: wait while this session's own work in progress is at its
        bound (the peer then waits on its socket, not everyone else on the loop)."""
