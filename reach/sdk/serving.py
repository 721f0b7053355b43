"""Serving invokes: run each handler at most once per idempotency key, acknowledge, answer.

``Agent`` is a ``Serving``: this is its half that turns ``invoke`` frames into handler runs
and ``ack``/``chunk``/``result``/``error`` frames, the other half (agent.py) being the
connection it keeps and the capabilities it declares. A serving object sends through
``_post_text`` and makes nested calls through ``_get_client``; the agent provides both.

One idempotency key never runs twice here: a duplicate that arrives while the first run is going
waits for it; one that arrives later gets the cached answer (a bounded cache). Faults are not
cached, so a retry after a fault really runs again. Runs and answers are kept by (caller, key):
an invoke answers only the caller whose key it is, even if some coordinator (or a peer link)
sends another caller's key under a different caller's name.

Frames about an invoke (its ack, chunks, outcome) and a probe's answer go out only on the
connection it came in on. Once that connection is gone (``_lost_connection``) they are dropped,
not sent on the next one: the work counts as lost with its connection (docs/protocol.md §2),
so the coordinator that takes over delivers it again under a new attempt, and it is that
attempt which is answered, from the run still going (which it joins) or from the cache. Sent
on the new connection, the old attempt's answer could only be refused as naming the wrong one.

Sync handlers run on the agent's own thread pool (``threads`` workers), never on Python's
shared default executor: one agent's blocked handlers cannot starve another agent's, or the
application's ``asyncio.to_thread``. A ``probe`` from the coordinator is answered from here,
the serving path: it waits for a free handler slot like an invoke, and runs its check (the
agent's ``@agent.probe`` function, or a no-op) where a handler would, so a wedged pool makes
the probe slow and the coordinator stops sending work (docs/protocol.md §3, probes).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_json

from reach.core.names import normalize
from reach.errors import ReachError, TaskError
from reach.sdk.client import Client
from reach.sdk.context import Context
from reach.sdk.faults import FaultLog
from reach.sdk.handlers import Handler, arguments, jsonable
from reach.sdk.outcomes import Outcome, error, not_json
from reach.wire import protocol as p
from reach.wire.numbers import finite

log = logging.getLogger("reach.agent")
CacheKey = tuple[str, str]  # (caller, idempotency key): a key answers its own caller only
# Frames built from what this agent holds (its own outcomes, invokes already parsed): checked
# by the type checker, not validated again at run time (the coordinator parses what it gets).
_Ack = p.unchecked(p.Ack)
_Chunk = p.unchecked(p.Chunk)
_Result = p.unchecked(p.Result)
_Error = p.unchecked(p.Error)
_WireError = p.unchecked(p.WireError)
_ProbeResult = p.unchecked(p.ProbeResult)


class Serving:
    """Invokes in, outcomes out, for the handlers in ``handlers`` (see the module docstring)."""

    name: str
    handlers: dict[str, Handler]
    max_frame_bytes: int
    frame_limit: int  # the coordinator's, once it has said (welcome)
    _closing: bool

    def __init__(self, max_concurrency: int, cache_size: int, ack_grace: float,
                 threads: int | None = None) -> None:
        if threads is not None and threads < 1:
            raise ValueError("threads must be at least 1")
        self.max_concurrency = max_concurrency
        self.threads = max_concurrency if threads is None else threads
        self._executor: ThreadPoolExecutor | None = None
        self._probe_fn: Callable[[], Any] | None = None
        self._probing: set[asyncio.Task[None]] = set()
        self.cache_size = cache_size
        self.ack_grace = ack_grace
        self.executions = 0  # handler runs started (duplicates answered from cache excluded)
        self._runs: dict[CacheKey, asyncio.Future[Outcome]] = {}
        # reads waiting out the ack grace, in deadline order, and the one timer for them
        self._acks: deque[tuple[float, p.Invoke, int, asyncio.Future[Outcome]]] = deque()
        self._ack_timer: asyncio.TimerHandle | None = None
        self._by_key: dict[CacheKey, asyncio.Task[None]] = {}  # each run's handler task
        # the attempts each run answers: its first invoke's and those that joined it (the
        # same key), so a cancel stops the run only once none of them still wants it
        self._sharing: dict[CacheKey, set[tuple[str, int]]] = {}
        self._contexts: dict[CacheKey, Context] = {}  # the context each run's handler holds
        self._done: OrderedDict[CacheKey, Outcome] = OrderedDict()
        self._work: set[asyncio.Task[Any]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0
        self._faults = FaultLog()  # one traceback per task (reach.sdk.faults)
        self._conn = 0  # which connection frames are read from now (counted as they go)

    def _post_text(self, text: str) -> None:
        raise NotImplementedError

    def _on_welcome(self, capabilities: list[str], refused: Any) -> None:
        """A registration update was answered (registered ``capabilities``, or ``refused``
        with this wire error)."""

    async def _get_client(self) -> Client:
        raise NotImplementedError

    def _lost_connection(self) -> None:
        """The connection frames were read from is gone: what is still to be said about the
        work and probes that came in on it is dropped, not said on the next one."""
        self._conn += 1

    def _send(self, conn: int, text: str) -> None:
        """Send ``text``, about something that came in on connection ``conn``, if that is
        still the connection (``_post_text`` sends on the current one)."""
        if conn == self._conn:
            self._post_text(text)

    # ------------------------------------------------------------ threads and probes

    def _run_sync(self, fn: Callable[..., Any], /, **kwargs: Any) -> asyncio.Future[Any]:
        """Run ``fn`` on this agent's own thread pool (made on first use, ``threads`` wide),
        in a copy of the caller's context, as ``asyncio.to_thread`` would."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.threads, thread_name_prefix=f"reach-{self.name}")
        ctx = contextvars.copy_context()
        return asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(ctx.run, fn, **kwargs))

    def _stop_threads(self) -> None:
        """Let the pool go (its threads end as their handlers return; none is waited for)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _on_probe(self, f: p.Probe) -> None:
        if self._closing:
            return
        task = asyncio.get_running_loop().create_task(self._answer_probe(f.id, self._conn),
                                                      name=f"probe-{f.id}")
        self._probing.add(task)
        task.add_done_callback(self._probing.discard)

    async def _answer_probe(self, probe_id: int, conn: int) -> None:
        """Answer probe ``probe_id`` as work is served: wait for a handler slot, run the
        check where a handler would run (the thread pool for a sync check, and for the
        default check of an agent with sync handlers), then say how it went."""
        assert self._slots is not None
        ok, detail = True, ""
        async with self._slots:
            fn = self._probe_fn
            try:
                if fn is None:
                    if any(not h.is_async for h in self.handlers.values()):
                        await self._run_sync(_nothing)
                else:
                    value = await (fn() if inspect.iscoroutinefunction(fn)
                                   else self._run_sync(fn))
                    if value is False:
                        ok, detail = False, "the probe check returned False"
            except Exception as exc:  # a failed check is an answer, not a crash
                ok, detail = False, f"{type(exc).__name__}: {exc}"[:2000]
        self._send(conn, p.dump(_ProbeResult(id=probe_id, ok=ok, detail=detail)))

    def _stop_probes(self) -> None:
        for task in list(self._probing):
            task.cancel()

    def _stop_acks(self) -> None:
        if self._ack_timer is not None:  # its loop may end with us: never leave it armed
            self._ack_timer.cancel()
            self._ack_timer = None
        self._acks.clear()

    def _on_frame(self, raw: str | bytes) -> None:
        try:
            frame = p.parse(raw)
        except ReachError as exc:
            log.warning("agent %s: bad frame from coordinator: %s", self.name, exc)
            return
        if isinstance(frame, p.Invoke):
            self._on_invoke(frame)
        elif isinstance(frame, p.Probe):
            self._on_probe(frame)
        elif isinstance(frame, p.Cancel):
            self._on_cancel(frame)
        elif isinstance(frame, p.Welcome):  # the answer to an update (Agent.update)
            self._on_welcome(list(frame.capabilities), None)
        elif isinstance(frame, p.Error):
            if frame.error.details.get("type") == "register":  # an update refused
                self._on_welcome([], frame.error)
                return
            if frame.task_id is not None:
                # An answer of ours came after the coordinator gave that attempt up (it
                # timed out, or went elsewhere): nothing to do, the run has ended or is
                # shared by the key's other invokes (docs/protocol.md §3, late answers).
                log.debug("agent %s: %s", self.name, frame.error.message)
                return
            log.warning("agent %s: coordinator says %s", self.name, frame.error.message)

    def _on_invoke(self, f: p.Invoke) -> None:
        if self._closing:  # deregistered: refuse before running, so it can go elsewhere
            self._post_text(p.dump(_Error(task_id=f.task_id, attempt=f.attempt, error=_WireError(
                code="unavailable", message=f"agent {self.name!r} is shutting down",
                details={"agent": self.name}))))
            return
        key, conn = (f.caller, f.idempotency_key), self._conn
        cached = self._done.get(key)
        if cached is not None:
            self._done.move_to_end(key)
            self._reply(f, conn, cached)
            return
        loop = asyncio.get_running_loop()
        running = self._runs.get(key)
        if running is not None:  # same key while the first run goes on: share its outcome
            self._sharing[key].add((f.task_id, f.attempt))
            running.add_done_callback(lambda fut: self._reply(f, conn, fut.result()))
        else:
            outcome: asyncio.Future[Outcome] = loop.create_future()
            self._runs[key] = outcome
            work = loop.create_task(self._execute(f, conn, outcome),
                                    name=f"handler-{f.task_id}")
            self._work.add(work)
            self._by_key[key] = work
            self._sharing[key] = {(f.task_id, f.attempt)}
            work.add_done_callback(lambda w: self._ended(w, f, conn, outcome))
            running = outcome
        handler = self.handlers.get(f.capability) or self._by_normalized(f.capability)
        if handler is not None and not handler.spec.idempotent:
            # A write is acknowledged before it starts, so the coordinator learns at once that
            # it may be running here (unacknowledged, it waits, and sends it again only to this
            # process: at most once, docs/protocol.md §8).
            self._ack(f, conn, running)
        else:  # a quick read answers within the grace, sparing the ack frame
            self._ack_later(loop, f, conn, running)

    def _on_cancel(self, f: p.Cancel) -> None:
        """The coordinator gave up an attempt (``attempt`` 0: every attempt of the task). Its
        run is stopped unless another invoke joined it and still waits for its outcome (a
        duplicate under the same key): then only the given-up one stops waiting."""
        for key, sharing in self._sharing.items():
            gone = {s for s in sharing if s[0] == f.task_id and f.attempt in (0, s[1])}
            if not gone:
                continue
            sharing -= gone
            if sharing:
                return
            ctx = self._contexts.get(key)
            if ctx is not None:
                ctx.cancelled = True
            work = self._by_key.get(key)
            if work is not None:
                work.cancel()
            return

    def _ended(self, work: asyncio.Task[None], f: p.Invoke, conn: int,
               outcome: asyncio.Future[Outcome]) -> None:
        """A handler's task is over (one cancelled before its first step: cleaned up here)."""
        self._work.discard(work)
        if not work.cancelled() or outcome.done():
            return
        key = (f.caller, f.idempotency_key)
        self._runs.pop(key, None)
        self._by_key.pop(key, None)
        self._sharing.pop(key, None)
        outcome.set_result(error("task_failed", "cancelled", answer=False, agent=self.name))
        self._reply(f, conn, outcome.result())

    def _ack(self, f: p.Invoke, conn: int, running: asyncio.Future[Outcome]) -> None:
        if not running.done():
            self._send(conn, p.dump(_Ack(task_id=f.task_id, attempt=f.attempt)))

    def _ack_later(self, loop: asyncio.AbstractEventLoop, f: p.Invoke, conn: int,
                   running: asyncio.Future[Outcome]) -> None:
        """Ack ``f`` after the grace unless it has answered by then. All reads share one
        grace, so their deadlines come in order and one timer serves them all: a timer per
        invoke cost a heap push, and a loop wake-up each, for acks that are almost never sent."""
        self._acks.append((loop.time() + self.ack_grace, f, conn, running))
        if self._ack_timer is None:
            self._ack_timer = loop.call_at(self._acks[0][0], self._acks_due, loop)

    def _acks_due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ack_timer = None
        now = loop.time()
        acks = self._acks
        while acks and (acks[0][0] <= now or acks[0][3].done()):
            _, f, conn, running = acks.popleft()
            self._ack(f, conn, running)  # a no-op for one that has answered
        if acks:
            self._ack_timer = loop.call_at(acks[0][0], self._acks_due, loop)

    async def _execute(self, f: p.Invoke, conn: int, outcome: asyncio.Future[Outcome]) -> None:
        key = (f.caller, f.idempotency_key)
        try:
            result = await self._run_handler(f, conn)
        except asyncio.CancelledError:
            self._runs.pop(key, None)
            outcome.set_result(("error", {"code": "task_failed", "message": "cancelled",
                                          "details": {"answer": False, "agent": self.name}}))
            self._reply(f, conn, outcome.result())
            raise
        finally:
            self._by_key.pop(key, None)
            self._sharing.pop(key, None)
        self._runs.pop(key, None)
        if result[0] == "ok" or result[1].get("details", {}).get("answer"):
            self._done[key] = result  # faults are not cached: a retry must really run again
            if len(self._done) > self.cache_size:
                self._done.popitem(last=False)
        outcome.set_result(result)
        self._reply(f, conn, result)

    async def _run_handler(self, f: p.Invoke, conn: int) -> Outcome:
        handler = self.handlers.get(f.capability) or self._by_normalized(f.capability)
        if handler is None:
            return error("task_failed", f"agent {self.name!r} does not serve {f.capability!r}",
                          answer=False, agent=self.name)
        assert self._slots is not None
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            self.executions += 1
            kwargs = arguments(handler, f, self._get_client)
            if handler.ctx_param is not None:
                self._contexts[(f.caller, f.idempotency_key)] = kwargs[handler.ctx_param]
            if handler.streaming:
                chunks: list[Any] = []
                stream = handler.fn(**kwargs)
                async for item in stream:
                    item = jsonable(item)
                    if not finite(item):  # it would reach the caller as null
                        await stream.aclose()
                        return not_json(f"chunk {len(chunks)}", item, self.name)
                    self._send(conn, p.dump(_Chunk(task_id=f.task_id, attempt=f.attempt,
                                                   seq=len(chunks), data=item)))
                    chunks.append(item)
                value: Any = chunks
            elif handler.is_async:
                value = await handler.fn(**kwargs)
            else:
                value = await self._run_sync(handler.fn, **kwargs)
            value = jsonable(value)
            to_json(value)  # not JSON-able: a fault, reported now rather than lost
            if not finite(value):  # NaN or inf would reach the caller as null
                return not_json("result", value, self.name)
            return ("ok", value)
        except TaskError as exc:
            # The handler's own details may use any name, "code" and "agent" included.
            return error("task_failed", exc.message,
                          **{**exc.details, "answer": True, "agent": self.name})
        except ValidationError as exc:
            return error("invalid_params", f"params rejected by {self.name!r}: {exc}",
                          answer=True, agent=self.name)
        except PydanticSerializationError as exc:
            return error("task_failed", f"result is not JSON-serializable: {exc}",
                          answer=False, agent=self.name)
        except Exception as exc:  # an agent fault: reported, counted, maybe retried elsewhere
            self._faults.fault(self.name, f, exc)
            return error("task_failed", f"{type(exc).__name__}: {exc}", answer=False,
                          agent=self.name, type=type(exc).__name__)
        finally:
            self._slots.release()
            self._contexts.pop((f.caller, f.idempotency_key), None)

    def _by_normalized(self, capability: str) -> Handler | None:
        for name, handler in self.handlers.items():
            if normalize(name) == capability:
                self.handlers[capability] = handler
                return handler
        return None

    def _reply(self, f: p.Invoke, conn: int, outcome: Outcome) -> None:
        kind, payload = outcome
        if kind == "ok":
            text = p.dump(_Result(task_id=f.task_id, attempt=f.attempt, result=payload))
            limit = min(self.max_frame_bytes, self.frame_limit)
            size = p.oversize(text, limit)
            if size is None:
                self._send(conn, text)
                return
            # Sent, it would close the connection (1009) and lose every task on it. Running
            # again would give the same result, so this is a final answer, not a fault.
            payload = error("task_failed", f"the result is {size} bytes, over "
                             f"the {limit}-byte frame limit; return a reference to large data",
                             answer=True, agent=self.name)[1]
        self._send(conn, p.dump(_Error(task_id=f.task_id, attempt=f.attempt,
                                       error=_WireError(**payload))))


def _nothing() -> None:
    """The default probe's check: nothing, run where a handler runs."""
