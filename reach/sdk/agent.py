"""Agent SDK: declare capabilities with a decorator, connect, serve; reconnects by itself.

    agent = Agent("order-analysis", max_concurrency=20)

    @agent.capability("sales.query", params=SalesQuery, latency_ms=200, idempotent=True)
    async def query_sales(region: str, quarter: str, ctx: Context) -> dict: ...

    await agent.connect(reach.url)      # registers, heartbeats, serves
    await agent.close()                 # deregisters and drains in-flight work

One idempotency key never runs twice here: a duplicate that arrives while the first run is going
waits for it; one that arrives later gets the cached answer (a bounded cache). Faults are not
cached, so a retry after a fault really runs again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import websockets
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_json
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from reach.core.keys import unscoped_key
from reach.core.schemas import schema_of
from reach.errors import ReachError, TaskError, Unavailable, from_wire
from reach.sdk.client import Client
from reach.sdk.context import Context
from reach.server.outbox import Outbox
from reach.wire import protocol as p

log = logging.getLogger("reach.agent")
Outcome = tuple[str, Any]  # ("ok", result) | ("error", wire error dict)
_FATAL = ("unauthorized", "invalid_params", "protocol_error")


@dataclass(slots=True)
class _Handler:
    spec: p.CapabilitySpec
    fn: Callable[..., Any]
    model: type[BaseModel] | None
    ctx_param: str | None
    accepts: frozenset[str] | None  # None: takes **kwargs
    streaming: bool
    is_async: bool


def _inspect(fn: Callable[..., Any]) -> tuple[str | None, frozenset[str] | None]:
    sig = inspect.signature(fn)
    ctx_param = None
    names: set[str] = set()
    var_kw = False
    for param in sig.parameters.values():
        ann = param.annotation
        if ann is Context or ann == "Context" or (ann is inspect.Parameter.empty
                                                  and param.name == "ctx"):
            ctx_param = param.name
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        else:
            names.add(param.name)
    return ctx_param, None if var_kw else frozenset(names)


class _Connecting:
    def __init__(self, agent: Agent, url: str) -> None:
        self._agent, self._url = agent, url

    def __await__(self) -> Generator[Any, None, Agent]:
        return self._open().__await__()

    async def _open(self) -> Agent:
        await self._agent._start(self._url)
        return self._agent

    async def __aenter__(self) -> Agent:
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        await self._agent.close()


class Agent:
    """An agent: a name, its capabilities, and a connection it keeps alive."""

    def __init__(self, name: str, token: str | None = None, max_concurrency: int = 20, *,
                 version: str = "0", cache_size: int = 10_000, reconnect_base: float = 0.1,
                 reconnect_cap: float = 5.0, ack_grace: float = 0.002,
                 max_frame_bytes: int = 1 << 20) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.name = name
        self.token = token
        self.max_concurrency = max_concurrency
        self.version = version
        self.cache_size = cache_size
        self.reconnect_base = reconnect_base
        self.reconnect_cap = reconnect_cap
        self.ack_grace = ack_grace
        self.max_frame_bytes = max_frame_bytes
        self.handlers: dict[str, _Handler] = {}
        self.agent_id: str | None = None
        self.heartbeat_interval = 10.0
        self.frame_limit = max_frame_bytes  # the coordinator's, once it has said (welcome)
        self.warnings: list[str] = []
        self.executions = 0  # handler runs started (duplicates answered from cache excluded)
        self.instance = os.urandom(8).hex()  # this object's key cache; see Register.instance
        self.url: str | None = None
        self._ws: ClientConnection | None = None
        self._out: Outbox | None = None
        self._runs: dict[str, asyncio.Future[Outcome]] = {}
        # reads waiting out the ack grace, in deadline order, and the one timer for them
        self._acks: deque[tuple[float, p.Invoke, asyncio.Future[Outcome]]] = deque()
        self._ack_timer: asyncio.TimerHandle | None = None
        self._by_task: dict[str, asyncio.Task[None]] = {}
        self._done: OrderedDict[str, Outcome] = OrderedDict()
        self._work: set[asyncio.Task[Any]] = set()
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0
        self._serve_task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._client: Client | None = None
        self._client_lock = asyncio.Lock()
        self._closing = False
        self.online = asyncio.Event()

    # ------------------------------------------------------------ declaring

    def capability(self, name: str, params: Any = None, *, scope: str = "read",
                   latency_ms: float = 1000.0, weight: float = 50.0, idempotent: bool = False,
                   intents: list[str] | tuple[str, ...] = (),
                   tags: list[str] | tuple[str, ...] = (),
                   description: str | None = None, hedge: bool = False
                   ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Declare a capability served by the decorated function (async, sync or async
        generator). ``params`` is a JSON schema dict or a pydantic model. ``hedge`` (for
        idempotent reads) lets the coordinator send a second copy to another agent when the
        first runs past the capability's P95, and take whichever answers first."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            model = params if isinstance(params, type) and issubclass(params, BaseModel) else None
            streaming = inspect.isasyncgenfunction(fn)
            spec = p.CapabilitySpec(
                name=name, params=schema_of(params), scope=scope,  # type: ignore[arg-type]
                latency_ms=latency_ms, weight=weight, idempotent=idempotent, hedge=hedge,
                streaming=streaming, intents=list(intents), tags=list(tags),
                description=description or (inspect.getdoc(fn) or "").split("\n")[0])
            ctx_param, accepts = _inspect(fn)
            self.handlers[name] = _Handler(spec, fn, model, ctx_param, accepts, streaming,
                                           inspect.iscoroutinefunction(fn) or streaming)
            return fn
        return register

    # ------------------------------------------------------------ connection

    def connect(self, url: str) -> _Connecting:
        """Register with the coordinator at ``url`` and serve until ``close()``."""
        return _Connecting(self, url)

    async def _start(self, url: str) -> None:
        if not self.handlers:
            raise ValueError(f"agent {self.name!r} declares no capability; use @agent.capability")
        if self._serve_task is not None:
            raise RuntimeError("agent is already connected")
        loop = asyncio.get_running_loop()
        self.url = url
        self._closing = False
        self.online = asyncio.Event()
        self._slots = asyncio.Semaphore(self.max_concurrency)
        self._ready = loop.create_future()
        self._serve_task = loop.create_task(self._serve(url), name=f"reach-agent-{self.name}")
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            await self._stop_serving()
            raise

    async def close(self, drain: float = 10.0) -> None:
        """Deregister, let in-flight work finish (up to ``drain`` s), then disconnect."""
        self._closing = True
        if self._out is not None:
            self._out.post(p.dump(p.Deregister()))
        if self._work:
            _, pending = await asyncio.wait(set(self._work), timeout=drain)
            for work in pending:
                work.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._client is not None:
            await self._client.close()
            self._client = None
        await self._stop_serving()

    async def _stop_serving(self) -> None:
        self._closing = True
        self.online.clear()
        if self._ack_timer is not None:  # its loop may end with us: never leave it armed
            self._ack_timer.cancel()
            self._ack_timer = None
        self._acks.clear()
        if self._ws is not None:
            await self._ws.close()
        if self._serve_task is not None:
            self._serve_task.cancel()
            await asyncio.gather(self._serve_task, return_exceptions=True)
            self._serve_task = None
        if self._out is not None:
            await self._out.aclose()
            self._out = None

    async def _serve(self, url: str) -> None:
        assert self._ready is not None
        failures = 0
        while not self._closing:
            try:
                await self._session(url)
                failures = 0
            except ReachError as exc:
                if not self._ready.done():
                    self._ready.set_exception(exc)
                    return
                if exc.code in _FATAL:
                    log.error("agent %s refused by coordinator: %s", self.name, exc)
                    return
            except (OSError, InvalidHandshake, InvalidURI, TimeoutError, ConnectionClosed) as exc:
                if not self._ready.done():
                    self._ready.set_exception(Unavailable(
                        f"cannot reach a coordinator at {url}: {exc}; is it running?"))
                    return
            self.online.clear()
            if self._closing:
                return
            failures += 1
            delay = min(self.reconnect_cap, self.reconnect_base * 2 ** min(failures - 1, 16))
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))  # full-ish jitter

    async def _session(self, url: str) -> None:
        ws = await websockets.connect(url, max_size=self.max_frame_bytes, compression=None,
                                      ping_interval=None, open_timeout=10)
        try:
            await ws.send(p.dump(p.Register(
                name=self.name, token=self.token, version=self.version,
                max_concurrency=self.max_concurrency, instance=self.instance,
                capabilities=[h.spec for h in self.handlers.values()])))
            async with asyncio.timeout(10):  # a coordinator that accepts but never answers
                frame = p.parse(await ws.recv())
            if isinstance(frame, p.Error):
                raise from_wire(frame.error.model_dump())
            if not isinstance(frame, p.Welcome):
                raise ReachError(f"expected 'welcome', got {frame.type!r}")
            self.agent_id = frame.agent_id
            self.heartbeat_interval = frame.heartbeat_interval
            self.frame_limit = frame.max_frame_bytes
            self.warnings = list(frame.warnings)
            for warning in frame.warnings:
                log.warning("agent %s: %s", self.name, warning)
            if self._out is not None:
                await self._out.aclose()
            self._ws, self._out = ws, Outbox(ws, name=f"reach-agent-out-{self.name}")
            beat = asyncio.get_running_loop().create_task(self._heartbeat(self._out))
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            self.online.set()
            try:
                async for raw in ws:
                    self._on_frame(raw)
            finally:
                beat.cancel()
                await asyncio.gather(beat, return_exceptions=True)
        finally:
            await ws.close()

    async def _heartbeat(self, out: Outbox) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            inflight = len(self._runs)
            out.post(p.dump(p.Heartbeat(inflight=inflight, queue_depth=self._waiting,
                                        load=min(1.0, inflight / self.max_concurrency))))

    def _post(self, frame: p.Frame) -> None:
        self._post_text(p.dump(frame))

    def _post_text(self, text: str) -> None:
        if self._out is not None:
            self._out.post(text)

    # ------------------------------------------------------------ serving

    def _on_frame(self, raw: str | bytes) -> None:
        try:
            frame = p.parse(raw)
        except ReachError as exc:
            log.warning("agent %s: bad frame from coordinator: %s", self.name, exc)
            return
        if isinstance(frame, p.Invoke):
            self._on_invoke(frame)
        elif isinstance(frame, p.Cancel):
            work = self._by_task.get(frame.task_id)
            if work is not None:
                work.cancel()
        elif isinstance(frame, p.Error):
            log.warning("agent %s: coordinator says %s", self.name, frame.error.message)

    def _on_invoke(self, f: p.Invoke) -> None:
        if self._closing:  # deregistered: refuse before running, so it can go elsewhere
            self._post_text(p.encode("error", task_id=f.task_id, attempt=f.attempt, error={
                "code": "unavailable", "message": f"agent {self.name!r} is shutting down",
                "details": {"agent": self.name}}))
            return
        key = f.idempotency_key
        cached = self._done.get(key)
        if cached is not None:
            self._done.move_to_end(key)
            self._reply(f, cached)
            return
        loop = asyncio.get_running_loop()
        running = self._runs.get(key)
        if running is not None:  # same key while the first run goes on: share its outcome
            running.add_done_callback(lambda fut: self._reply(f, fut.result()))
        else:
            outcome: asyncio.Future[Outcome] = loop.create_future()
            self._runs[key] = outcome
            work = loop.create_task(self._execute(f, outcome), name=f"handler-{f.task_id}")
            self._work.add(work)
            self._by_task[f.task_id] = work
            work.add_done_callback(self._work.discard)
            work.add_done_callback(lambda w: self._cancelled_early(w, f, outcome))
            running = outcome
        handler = self.handlers.get(f.capability) or self._by_normalized(f.capability)
        if handler is not None and not handler.spec.idempotent:
            # A write is acknowledged before it starts: were this process to die unacked, the
            # coordinator takes the work as never delivered and sends it elsewhere, which is
            # only safe if it really did not start here.
            self._ack(f, running)
        else:  # a quick read answers within the grace, sparing the ack frame
            self._ack_later(loop, f, running)

    def _cancelled_early(self, work: asyncio.Task[None], f: p.Invoke,
                         outcome: asyncio.Future[Outcome]) -> None:
        """A task cancelled before its first step never ran ``_execute``'s cleanup."""
        if not work.cancelled() or outcome.done():
            return
        self._runs.pop(f.idempotency_key, None)
        self._by_task.pop(f.task_id, None)
        outcome.set_result(_error("task_failed", "cancelled", answer=False, agent=self.name))
        self._reply(f, outcome.result())

    def _ack(self, f: p.Invoke, running: asyncio.Future[Outcome]) -> None:
        if not running.done():
            self._post_text(p.encode("ack", task_id=f.task_id, attempt=f.attempt))

    def _ack_later(self, loop: asyncio.AbstractEventLoop, f: p.Invoke,
                   running: asyncio.Future[Outcome]) -> None:
        """Ack ``f`` after the grace unless it has answered by then. All reads share one
        grace, so their deadlines come in order and one timer serves them all: a timer per
        invoke cost a heap push, and a loop wake-up each, for acks that are almost never sent."""
        self._acks.append((loop.time() + self.ack_grace, f, running))
        if self._ack_timer is None:
            self._ack_timer = loop.call_at(self._acks[0][0], self._acks_due, loop)

    def _acks_due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ack_timer = None
        now = loop.time()
        acks = self._acks
        while acks and (acks[0][0] <= now or acks[0][2].done()):
            _, f, running = acks.popleft()
            self._ack(f, running)  # a no-op for one that has answered
        if acks:
            self._ack_timer = loop.call_at(acks[0][0], self._acks_due, loop)

    async def _execute(self, f: p.Invoke, outcome: asyncio.Future[Outcome]) -> None:
        key = f.idempotency_key
        try:
            result = await self._run_handler(f)
        except asyncio.CancelledError:
            self._runs.pop(key, None)
            outcome.set_result(("error", {"code": "task_failed", "message": "cancelled",
                                          "details": {"answer": False, "agent": self.name}}))
            self._reply(f, outcome.result())
            raise
        finally:
            self._by_task.pop(f.task_id, None)
        self._runs.pop(key, None)
        if result[0] == "ok" or result[1].get("details", {}).get("answer"):
            self._done[key] = result  # faults are not cached: a retry must really run again
            if len(self._done) > self.cache_size:
                self._done.popitem(last=False)
        outcome.set_result(result)
        self._reply(f, result)

    async def _run_handler(self, f: p.Invoke) -> Outcome:
        handler = self.handlers.get(f.capability) or self._by_normalized(f.capability)
        if handler is None:
            return _error("task_failed", f"agent {self.name!r} does not serve {f.capability!r}",
                          answer=False, agent=self.name)
        assert self._slots is not None
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            self.executions += 1
            kwargs = self._arguments(handler, f)
            if handler.streaming:
                chunks: list[Any] = []
                async for item in handler.fn(**kwargs):
                    item = _jsonable(item)
                    self._post_text(p.encode("chunk", task_id=f.task_id, attempt=f.attempt,
                                             seq=len(chunks),
                                       data=item))
                    chunks.append(item)
                value: Any = chunks
            elif handler.is_async:
                value = await handler.fn(**kwargs)
            else:
                value = await asyncio.to_thread(handler.fn, **kwargs)
            value = _jsonable(value)
            to_json(value)  # not JSON-able: a fault, reported now rather than lost
            return ("ok", value)
        except TaskError as exc:
            # The handler's own details may use any name, "code" and "agent" included.
            return _error("task_failed", exc.message,
                          **{**exc.details, "answer": True, "agent": self.name})
        except ValidationError as exc:
            return _error("invalid_params", f"params rejected by {self.name!r}: {exc}",
                          answer=True, agent=self.name)
        except PydanticSerializationError as exc:
            return _error("task_failed", f"result is not JSON-serializable: {exc}",
                          answer=False, agent=self.name)
        except Exception as exc:  # an agent fault: reported, counted, maybe retried elsewhere
            log.exception("agent %s: handler for %s failed", self.name, f.capability)
            return _error("task_failed", f"{type(exc).__name__}: {exc}", answer=False,
                          agent=self.name, type=type(exc).__name__)
        finally:
            self._slots.release()

    def _by_normalized(self, capability: str) -> _Handler | None:
        from reach.core.names import normalize
        for name, handler in self.handlers.items():
            if normalize(name) == capability:
                self.handlers[capability] = handler
                return handler
        return None

    def _arguments(self, handler: _Handler, f: p.Invoke) -> dict[str, Any]:
        if handler.model is not None:
            model = handler.model.model_validate(f.params)
            kwargs = {k: getattr(model, k) for k in type(model).model_fields}
        else:
            kwargs = dict(f.params)
        if handler.accepts is not None:
            kwargs = {k: v for k, v in kwargs.items() if k in handler.accepts}
        if handler.ctx_param is not None:
            kwargs[handler.ctx_param] = Context(
                task_id=f.task_id, trace_id=f.trace_id,
                idempotency_key=unscoped_key(f.caller, f.idempotency_key),
                capability=f.capability, caller=f.caller, attempt=f.attempt,
                parent_task_id=f.parent_task_id, traceparent=f.traceparent,
                deadline=None if f.deadline_ms is None
                else time.monotonic() + f.deadline_ms / 1000.0,
                _client=self._get_client)
        return kwargs

    async def _get_client(self) -> Client:
        # Handlers starting together share one connection (the lock), made on first use.
        async with self._client_lock:
            if self._client is None:
                assert self.url is not None
                self._client = await Client.connect(self.url, caller=self.name,
                                                    token=self.token)
            return self._client

    def _reply(self, f: p.Invoke, outcome: Outcome) -> None:
        kind, payload = outcome
        if kind == "ok":
            text = p.encode("result", task_id=f.task_id, attempt=f.attempt, result=payload)
            limit = min(self.max_frame_bytes, self.frame_limit)
            if len(text) <= limit // 4 or len(text.encode()) <= limit:
                self._post_text(text)
                return
            # Sent, it would close the connection (1009) and lose every task on it. Running
            # again would give the same result, so this is a final answer, not a fault.
            payload = _error("task_failed", f"the result is {len(text.encode())} bytes, over "
                             f"the {limit}-byte frame limit; return a reference to large data",
                             answer=True, agent=self.name)[1]
        self._post_text(p.encode("error", task_id=f.task_id, attempt=f.attempt, error=payload))


def _error(code: str, message: str, /, **details: Any) -> Outcome:
    return ("error", {"code": code, "message": message, "details": details})


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value

