"""Caller SDK: ``Client`` submits work to a coordinator and gets typed results or typed errors.

    client = await Client.connect(reach.url, caller="planner")
    result = await client.call("sales.query", {"region": "east", "quarter": "Q3"}, timeout=5)
    handle = await client.submit("report.generate", {...}, idempotency_key="k1")
    result = await handle.result(timeout=15)

If the coordinator goes away, the client reconnects by itself and asks again for the outcome of
every task it is still waiting on: an acknowledged task survives a coordinator restart, and so
does the caller's wait for it. Given several coordinators of one Reach
(``Client.connect([url_a, url_b], ...)``), it stays on the first that answers and, when that
one goes away, moves on to the next (endpoints.py) and asks that one instead; ``client.url``
is the one it is on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from reach.core.backoff import Backoff
from reach.core.tasks import SubmitRequest
from reach.errors import ReachError, ReachTimeout, Unavailable
from reach.sdk.connection import redial
from reach.sdk.endpoints import Endpoints, dial_any, spread_for
from reach.sdk.fallback import answer_of
from reach.sdk.handle import Handle, consume
from reach.sdk.opening import Opening
from reach.sdk.streams import chunks
from reach.sdk.submits import submit_frame
from reach.sdk.waiters import Waiters
from reach.wire import inbound
from reach.wire import protocol as p
from reach.wire.outbox import Outbox

__all__ = ["Client", "Handle"]  # Handle lives in reach.sdk.handle; reach imports it from here

log = logging.getLogger("reach.client")

RECONNECT = Backoff(base=0.05, factor=2.0, cap=2.0, jitter=0.2)
"""How soon the client tries again after losing its coordinator: 50 ms, doubling up to 2 s."""

OUTCOME_GRACE = 1.0  # s a call waits past its timeout for the coordinator's own answer


def _time_out(outcome: asyncio.Future[Any]) -> None:
    """A call's wait is over: its outcome fails with TimeoutError (``call`` says which)."""
    if not outcome.done():
        outcome.set_exception(TimeoutError())


class Client(Waiters):
    """A caller's connection to a coordinator. Create with ``await Client.connect(url, ...)``;
    ``url`` is one ``ws://`` URL or a list of several coordinators' (tried in that order;
    ``prefer="random"`` starts at a random one instead, as agents do)."""

    def __init__(self, url: str | Sequence[str], caller: str = "anonymous",
                 token: str | None = None, *, reconnect_for: float = 60.0,
                 max_frame_bytes: int = 1 << 20, prefer: str = "first") -> None:
        super().__init__()
        self._endpoints = Endpoints(url, spread=spread_for(prefer, random.Random()))
        self.caller = caller
        self.token = token
        self.reconnect_for = reconnect_for
        self.max_frame_bytes = max_frame_bytes
        self.frame_limit = max_frame_bytes  # the coordinator's, once it has said (welcome)
        self._ws: ClientConnection | None = None
        self._out: Outbox | None = None
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._rng = random.Random()

    @classmethod
    def connect(cls, url: str | Sequence[str], caller: str = "anonymous",
                token: str | None = None, **options: Any) -> Opening[Client]:
        """Connect to the coordinator at ``url`` (or the first of a list that answers): await
        it, or use it with ``async with``."""
        client = cls(url, caller, token, **options)
        return Opening(client, client._open, client.close)

    @property
    def url(self) -> str:
        """The URL of the coordinator this client is on (or was on last, while it moves)."""
        return self._endpoints.url

    @property
    def urls(self) -> tuple[str, ...]:
        """Every coordinator URL this client may use, as given."""
        return self._endpoints.urls

    # ------------------------------------------------------------ connection

    async def _open(self) -> None:
        self._endpoints.check()
        await self._dial()
        self._reader = asyncio.get_running_loop().create_task(self._read_loop(),
                                                              name=f"reach-client-{self.caller}")

    async def _dial(self) -> None:
        ws, welcome, target = await dial_any(
            self._endpoints, p.Hello(caller=self.caller, token=self.token),
            max_frame_bytes=self.max_frame_bytes)
        moved = self._endpoints.connected(target)
        if moved is not None:  # once per move; tries that fail on the way are not logged
            log.warning("client %s: coordinator %s lost, moved to %s", self.caller, moved,
                        target)
        if self._out is not None:
            await self._out.aclose()
        self._ws = ws
        self.frame_limit = welcome.max_frame_bytes
        self._out = Outbox(ws, name=f"reach-client-out-{self.caller}")
        self._connected.set()

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        # Waiters are failed before the outbox stops (they do not need it): under coverage on
        # Python 3.11 no line after awaiting that stop is traced (CPython gh-106749).
        self._fail_all(Unavailable("client closed"))
        if self._out is not None:
            await self._out.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read_loop(self) -> None:
        while True:  # close() sets _closing, then cancels this task wherever it waits
            ws = self._ws
            assert ws is not None
            try:
                await inbound.read(ws, self._on_frame)
            except ConnectionClosed:
                pass
            if self._closing:
                return
            self._connected.clear()
            self._lost(Unavailable("connection to the coordinator was lost"))
            if not await self._reconnect():
                self._fail_all(Unavailable(f"{self._endpoints.describe()} unreachable for "
                                           f"{self.reconnect_for}s"))
                return

    async def _reconnect(self) -> bool:
        if not await redial(self._dial, within=self.reconnect_for, backoff=RECONNECT,
                            stopped=lambda: self._closing, rng=self._rng):
            return False
        for frame in self._asks_again():  # the same coordinator, or the next one
            self._send(frame)
        return True

    def _send(self, frame: p.Frame | str) -> None:
        text = frame if isinstance(frame, str) else p.dump(frame)
        if self._out is None or not self._connected.is_set() or not self._out.post(text):
            raise Unavailable("not connected to a coordinator")

    async def _await_connected(self) -> None:
        """Wait out a reconnect in progress (up to ``reconnect_for``)."""
        if not self._connected.is_set():
            try:
                async with asyncio.timeout(self.reconnect_for):
                    await self._connected.wait()
            except TimeoutError:
                raise Unavailable(f"not connected to {self.url}") from None

    async def _pace(self) -> None:
        """Hold a submit while the coordinator asked us to slow down."""
        wait = self._pacer.wait(asyncio.get_running_loop().time())
        if wait > 0:
            await asyncio.sleep(wait)

    async def _request(self, frame: p.Frame | str, req_id: int) -> Any:
        await self._await_connected()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._requests[req_id] = fut
        try:
            self._send(frame)
            return await fut
        finally:  # answered, failed or cancelled (a waiter given up on must not stay)
            self._requests.pop(req_id, None)

    async def _submit(self, request: SubmitRequest, *, stream: bool = False
                      ) -> tuple[Handle, int]:
        await self._pace()
        req_id = next(self._ids)
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[Any] = loop.create_future()
        outcome.add_done_callback(consume)
        if stream:
            self._streams[req_id] = asyncio.Queue()
        # Registered before sending: the outcome may arrive right behind the acceptance.
        self._outcomes[req_id] = ("", outcome)
        try:
            text = self._submit_frame(req_id, request, defer_ack=False)
            accepted = await self._request(text, req_id)
        except BaseException:
            self._streams.pop(req_id, None)
            self._outcomes.pop(req_id, None)
            self._submits.pop(req_id, None)
            raise
        return Handle(self, accepted.task_id, accepted.trace_id, accepted.duplicate,
                      outcome), req_id

    def _submit_frame(self, req_id: int, r: SubmitRequest, defer_ack: bool) -> str:
        """The ``submit`` frame for ``r``, kept to be sent again after a reconnect."""
        text = submit_frame(req_id, r, defer_ack=defer_ack,
                            limit=min(self.max_frame_bytes, self.frame_limit))
        self._submits[req_id] = text
        return text

    # ------------------------------------------------------------ calls

    async def submit(self, capability: str, params: dict[str, Any] | None = None, *,
                     idempotency_key: str | None = None, priority: int = 5,
                     tags: Mapping[str, str | bool] | None = None,
                     timeout: float | None = None, max_retries: int | None = None,
                     trace_id: str | None = None, parent_task_id: str | None = None,
                     traceparent: str | None = None, hedge: bool | None = None,
                     fallback: dict[str, Any] | None = None,
                     queue_wait: float | None = None, notify: str | None = None,
                     then: str | Sequence[str | Mapping[str, Any]] | None = None) -> Handle:
        """Hand a task over; returns once the coordinator has durably accepted it. ``hedge``
        and ``fallback`` override the capability's own (``handle.fallback`` tells, later);
        ``tags`` (``{"region": "eu"}``) keeps the task to agents declaring them (§7).

        ``notify="https://..."`` has its outcome POSTed there, signed, when it ends
        (docs/webhooks.md). ``then="report.build"`` (or a list of steps) passes a success's
        result on as the next capability's params, each step a task of its own in the same
        trace; ``handle.result()`` follows the chain to its last step (docs/protocol.md).

        An accepted task waits its turn when every agent is busy or none can take it now (a
        restart, a drain): until its ``timeout``, else the coordinator's ``max_wait``, or
        ``queue_wait`` seconds if given. A full backlog refuses the submit (``Rejected``)."""
        handle, _ = await self._submit(SubmitRequest(
            capability, params or {}, idempotency_key=idempotency_key, priority=priority,
            timeout=timeout, max_retries=max_retries, trace_id=trace_id,
            parent_task_id=parent_task_id, traceparent=traceparent, hedge=hedge, tags=tags,
            fallback=fallback, queue_wait=queue_wait, notify=notify, then=steps_arg(then)))
        return handle

    async def call(self, capability: str, params: dict[str, Any] | None = None, *,
                   timeout: float | None = None, idempotency_key: str | None = None,
                   priority: int = 5, tags: Mapping[str, str | bool] | None = None,
                   max_retries: int | None = None,
                   trace_id: str | None = None, parent_task_id: str | None = None,
                   traceparent: str | None = None, hedge: bool | None = None,
                   fallback: dict[str, Any] | None = None, detail: bool = False,
                   queue_wait: float | None = None, notify: str | None = None,
                   then: str | Sequence[str | Mapping[str, Any]] | None = None) -> Any:
        """Submit and wait for the result (``timeout`` bounds the whole call, retries included).
        ``detail=True`` returns an ``Answer`` (the value, and its ``Fallback`` if it is one).
        ``then`` and ``notify`` as for ``submit``: a chain's call answers with its last step's
        result (``timeout`` then bounds the wait for the whole chain; each step is given it as
        its own deadline).
        A call fails fast: ``Rejected`` when every agent stays busy for the coordinator's
        short ``queue_wait``, ``Unavailable`` when none can take it now; ``queue_wait=S`` lets
        it wait up to S seconds for either (``submit`` waits until its deadline).

        Only the outcome is awaited, so a quick call costs one frame each way: the coordinator
        folds its acknowledgement into the answer (``defer_ack``)."""
        request = SubmitRequest(
            capability, params or {}, idempotency_key=idempotency_key, priority=priority,
            timeout=timeout, max_retries=max_retries, trace_id=trace_id,
            parent_task_id=parent_task_id, traceparent=traceparent, hedge=hedge, tags=tags,
            fallback=fallback, queue_wait=queue_wait, notify=notify, then=steps_arg(then))
        if not self._connected.is_set():
            await self._await_connected()
        loop = asyncio.get_running_loop()
        if self._pacer.wait(loop.time()) > 0:
            await self._pace()
        req_id = next(self._ids)
        outcome: asyncio.Future[Any] = loop.create_future()
        outcome.add_done_callback(consume)
        self._outcomes[req_id] = ("", outcome)
        try:
            self._send(self._submit_frame(req_id, request, defer_ack=True))
            if timeout is None:  # (no deadline: no timer)
                return answer_of(await outcome, detail)
            # A timer that fails the outcome itself: what ``asyncio.timeout`` does for any
            # await (cancel the task, then turn the cancellation into TimeoutError) costs
            # about ten Python calls more per call, for one future this call owns.
            timer = loop.call_at(loop.time() + timeout + OUTCOME_GRACE, _time_out, outcome)
            try:
                return answer_of(await outcome, detail)
            finally:
                timer.cancel()
        except ReachError:
            raise  # the task's own error (a remote timeout included), not our wait's
        except TimeoutError:
            raise ReachTimeout(f"{capability!r} gave no outcome within {timeout}s",
                               capability=capability) from None
        finally:
            self._outcomes.pop(req_id, None)
            self._submits.pop(req_id, None)

    async def call_intent(self, text: str, params: dict[str, Any] | None = None, *,
                          timeout: float | None = None, idempotency_key: str | None = None,
                          priority: int = 5, tags: Mapping[str, str | bool] | None = None,
                          choose: str | None = None) -> Any:
        """Say what you need in words (Chinese or English); Reach picks the capability.
        No confident match raises ``NoRoute`` listing the closest capabilities
        (``suggestions``, ``candidates``) and the words that matched each (``why``).
        ``choose`` one of them to call it with the same words: the coordinator learns the
        phrase, and the same request routes there next time (docs/intent.md)."""
        handle, _ = await self._submit(SubmitRequest(
            choose or "", params or {}, idempotency_key=idempotency_key, priority=priority,
            timeout=timeout, intent=text, tags=tags))
        return await handle.result(None if timeout is None else timeout + OUTCOME_GRACE)

    async def stream(self, capability: str, params: dict[str, Any] | None = None, *,
                     timeout: float | None = None, **options: Any) -> AsyncIterator[Any]:
        """Yield the chunks a streaming capability produces, as they arrive."""
        _, req_id = await self._submit(SubmitRequest(
            capability, params or {}, idempotency_key=options.get("idempotency_key"),
            priority=options.get("priority", 5), timeout=timeout,
            max_retries=options.get("max_retries"), trace_id=options.get("trace_id"),
            parent_task_id=options.get("parent_task_id"),
            traceparent=options.get("traceparent"), tags=options.get("tags")), stream=True)
        try:
            async for chunk in chunks(self._streams[req_id]):
                yield chunk
        finally:
            self._streams.pop(req_id, None)

    async def status(self, task_id: str) -> dict[str, Any]:
        """Any task's state, attempts and history, also after a coordinator restart."""
        req_id = next(self._ids)
        frame = await self._request(p.Status(id=req_id, task_id=task_id), req_id)
        return dict(frame.task)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        """Cancel one of this caller's tasks (``Handle.cancel``); its view after the cancel."""
        req_id = next(self._ids)
        frame = await self._request(p.Cancel(id=req_id, task_id=task_id), req_id)
        return dict(frame.task)

    async def _subscribe(self, task_id: str) -> asyncio.Future[Any]:
        await self._await_connected()  # a move under way: ask where it ends
        req_id = next(self._ids)
        outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        outcome.add_done_callback(consume)
        self._outcomes[req_id] = (task_id, outcome)
        try:
            self._send(p.Result(task_id=task_id, id=req_id))
        except Unavailable:
            pass  # lost just now: the reconnect asks again for every outcome awaited
        return outcome

    async def result(self, task_id: str, timeout: float | None = None) -> Any:
        """Wait for the outcome of any task by id (for example, one submitted before a restart)."""
        handle = Handle(self, task_id, "", False, await self._subscribe(task_id))
        return await handle.result(timeout)


def steps_arg(then: str | Sequence[str | Mapping[str, Any]] | None
              ) -> str | list[str | dict[str, Any]] | None:
    """``then`` as the submit frame carries it (a name, or a list of names and steps)."""
    if then is None or isinstance(then, str):
        return then
    return [step if isinstance(step, str) else dict(step) for step in then]
