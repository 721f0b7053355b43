"""Agent SDK: declare capabilities with a decorator, connect, serve; reconnects by itself.

    agent = Agent("order-analysis", max_concurrency=20)

    @agent.capability("sales.query", params=SalesQuery, latency_ms=200, idempotent=True)
    async def query_sales(region: str, quarter: str, ctx: Context) -> dict: ...

    @agent.probe                        # optional: a health check that exercises real work
    async def ping_db() -> bool: ...

    await agent.connect(reach.url)      # registers, heartbeats, serves, answers probes
    await agent.connect([url_a, url_b]) # or: several coordinators of one Reach (endpoints.py)
    await agent.close()                 # deregisters and drains in-flight work

Given several coordinators, an agent starts on a random one (a fleet given the same list
spreads over them), stays there, and when it is lost registers with another (the others tried
from a random one, the lost one last); ``agent.url`` is the one it is on. With
``connect([...], prefer="first")`` it starts on the first that answers and after a loss goes
on down the list, as a caller does: a way to place agents on chosen nodes.

``Agent(..., heartbeat_interval=, probe_interval=)`` ask the coordinator for this agent's own
intervals (it bounds them and says in ``welcome`` what it granted); ``threads`` sizes the
agent's own pool for sync handlers (default ``max_concurrency``), shut down on ``close``.

Running handlers (idempotency, acks, answers) is ``Serving``'s job, in serving.py (handlers.py:
what a declared handler is, and its arguments); this module declares capabilities and keeps
the connection.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from reach.core.backoff import Backoff
from reach.core.schemas import schema_of
from reach.errors import ReachError, from_wire
from reach.sdk.client import Client
from reach.sdk.connection import unreachable
from reach.sdk.endpoints import Endpoints, dial_any, spread_for
from reach.sdk.handlers import Handler, inspect_handler
from reach.sdk.opening import Opening
from reach.sdk.serving import Serving
from reach.wire import inbound
from reach.wire import protocol as p
from reach.wire.outbox import Outbox

log = logging.getLogger("reach.agent")
_FATAL = ("unauthorized", "invalid_params", "protocol_error")  # refusals: stop, do not retry
REPLACED = 4000  # close code: another connection registered this agent's name and took it over


class Agent(Serving):
    """An agent: a name, its capabilities, and a connection it keeps alive."""

    def __init__(self, name: str, token: str | None = None, max_concurrency: int = 20, *,
                 version: str = "0", cache_size: int = 10_000, reconnect_base: float = 0.1,
                 reconnect_cap: float = 5.0, ack_grace: float = 0.002,
                 max_frame_bytes: int = 1 << 20, heartbeat_interval: float | None = None,
                 probe_interval: float | None = None, threads: int | None = None) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        for what, value in (("heartbeat_interval", heartbeat_interval),
                            ("probe_interval", probe_interval)):
            if value is not None and not 0 < value <= 86_400:
                raise ValueError(f"{what} must be in (0, 86400] seconds")
        super().__init__(max_concurrency, cache_size, ack_grace, threads)
        self.name = name
        self.token = token
        self.version = version
        self.reconnect_base = reconnect_base
        self.reconnect_cap = reconnect_cap
        self.max_frame_bytes = max_frame_bytes
        self.handlers: dict[str, Handler] = {}
        self.agent_id: str | None = None
        # asked for (None: the coordinator's); then what the welcome granted
        self.asked_intervals = (heartbeat_interval, probe_interval)
        self.heartbeat_interval = 10.0 if heartbeat_interval is None else heartbeat_interval
        self.probe_interval: float | None = probe_interval
        self.frame_limit = max_frame_bytes  # the coordinator's, once it has said (welcome)
        self.warnings: list[str] = []
        self.instance = os.urandom(8).hex()  # this object's key cache; see Register.instance
        self.url: str | None = None  # the coordinator it is on (or was on last, while it moves)
        self.urls: tuple[str, ...] = ()  # every one it may use, as given to connect()
        self._ws: ClientConnection | None = None
        self._out: Outbox | None = None
        self._rng = random.Random()
        self._serve_task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._client: Client | None = None
        self._client_lock = asyncio.Lock()
        self._closing = False
        self.online = asyncio.Event()
        self._updates: deque[asyncio.Future[list[str]]] = deque()  # awaiting update()

    # ------------------------------------------------------------ declaring

    def capability(self, name: str, params: Any = None, *, scope: str = "read",
                   latency_ms: float | None = None, weight: float = 50.0, idempotent: bool = False,
                   intents: list[str] | tuple[str, ...] = (),
                   tags: list[str] | tuple[str, ...] = (),
                   description: str | None = None, hedge: bool = False,
                   returns: Any = None, fallback: dict[str, Any] | None = None,
                   warmup_s: float | None = None, max_concurrency: int | None = None
                   ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Declare a capability served by the decorated function (async, sync or async
        generator). ``params`` is a JSON schema dict or a pydantic model. ``hedge`` (for
        idempotent reads) lets the coordinator send a second copy to another agent when the
        first runs past the capability's P95, and take whichever answers first. ``returns``
        (a JSON schema dict or a pydantic model, like ``params``) is checked by the
        coordinator on every result: one that breaks it is this agent's fault (``bad_result``),
        retried elsewhere when idempotent. ``fallback`` is what callers get when no agent can
        answer: ``{"value": v}``, ``{"last_good": {"max_age_s": s}}`` (add ``"shared": True``
        for a read whose results do not depend on the caller) or ``{"capability": name}``.
        ``warmup_s`` overrides the coordinator's warm-up period for this capability (0: none);
        ``max_concurrency`` limits its calls in flight at this agent, below the agent's own
        (its latency tier already gets a share of the slots, docs/architecture.md)."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            model = params if isinstance(params, type) and issubclass(params, BaseModel) else None
            streaming = inspect.isasyncgenfunction(fn)
            spec = p.CapabilitySpec(
                name=name, params=schema_of(params), scope=scope,  # type: ignore[arg-type]
                latency_ms=latency_ms, weight=weight, idempotent=idempotent, hedge=hedge,
                streaming=streaming, intents=list(intents), tags=list(tags),
                warmup_s=warmup_s, max_concurrency=max_concurrency,
                description=description or (inspect.getdoc(fn) or "").split("\n")[0],
                returns=None if returns is None else schema_of(returns), fallback=fallback)
            ctx_param, accepts = inspect_handler(fn)
            self.handlers[name] = Handler(spec, fn, model, ctx_param, accepts, streaming,
                                           inspect.iscoroutinefunction(fn) or streaming)
            return fn
        return register

    def probe(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Declare this agent's health check (a decorator): a function of no arguments, sync
        or async, that exercises real work (a database ping through the pool handlers use).
        It answers the coordinator's probes from the serving path; returning False or
        raising says the agent is not fit for work. Without one, a probe runs a no-op there."""
        self._probe_fn = fn
        return fn

    # ------------------------------------------------------------ connection

    def connect(self, url: str | Sequence[str], *, prefer: str = "random"
                ) -> Opening[Agent]:
        """Register with the coordinator at ``url`` (or with one of a list, moving on to
        another when it is lost) and serve until ``close()``: await it, or use it with
        ``async with`` (which closes the agent on exit). ``prefer`` picks where in a list it
        starts: ``"random"`` (a fleet spreads) or ``"first"`` (the first that answers, then
        the rest in order; endpoints.py)."""
        spread = spread_for(prefer, self._rng)  # a wrong value is refused at once
        return Opening(self, lambda: self._start(url, spread), self.close)

    async def _start(self, url: str | Sequence[str], spread: random.Random | None) -> None:
        if not self.handlers:
            raise ValueError(f"agent {self.name!r} declares no capability; use @agent.capability")
        if self._serve_task is not None:
            raise RuntimeError("agent is already connected")
        endpoints = Endpoints(url, spread=spread)
        endpoints.check()
        loop = asyncio.get_running_loop()
        self.urls = endpoints.urls
        self.url = endpoints.url
        self._closing = False
        self.online = asyncio.Event()
        self._slots = asyncio.Semaphore(self.max_concurrency)
        self._ready = loop.create_future()
        self._serve_task = loop.create_task(self._serve(endpoints),
                                            name=f"reach-agent-{self.name}")
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
            client, self._client = self._client, None
            await client.close()
        await self._stop_serving()

    async def _stop_serving(self) -> None:
        self._closing = True
        self.online.clear()
        self._stop_acks()
        self._stop_probes()
        self._stop_threads()
        if self._ws is not None:
            await self._ws.close()
        if self._serve_task is not None:
            self._serve_task.cancel()
            await asyncio.gather(self._serve_task, return_exceptions=True)
            self._serve_task = None
        if self._out is not None:
            await self._out.aclose()
            self._out = None

    async def _serve(self, endpoints: Endpoints) -> None:
        assert self._ready is not None
        # Never longer than the cap, and spread so that agents cut off together come back apart.
        backoff = Backoff(self.reconnect_base, 2.0, self.reconnect_cap, jitter=0.5, mode="below")
        failures = 0
        while not self._closing:
            try:
                await self._session(endpoints)
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
                    self._ready.set_exception(unreachable(endpoints.url, exc))
                    return
                if isinstance(exc, ConnectionClosed) and exc.rcvd is not None and \
                        exc.rcvd.code == REPLACED:
                    # Another process proved it is this agent and took the name over:
                    # coming back would take it from that one, and so on, both flapping.
                    log.error("agent %s: replaced by a newer connection of the same agent "
                              "(close 4000); not reconnecting", self.name)
                    self.online.clear()
                    return
            self.online.clear()
            if self._closing:
                return
            await asyncio.sleep(backoff.delay(failures, self._rng))
            failures += 1

    def _register(self) -> p.Register:
        return p.Register(name=self.name, token=self.token, version=self.version,
                          max_concurrency=self.max_concurrency, instance=self.instance,
                          capabilities=[h.spec for h in self.handlers.values()],
                          probes=True, heartbeat_interval=self.asked_intervals[0],
                          probe_interval=self.asked_intervals[1])

    def withdraw(self, name: str) -> None:
        """Stop declaring capability ``name`` (send it with ``update``); its calls already
        running finish."""
        if name not in self.handlers:
            raise ValueError(f"agent {self.name!r} declares no capability {name!r}; it "
                             f"declares {', '.join(sorted(self.handlers)) or 'none'}")
        del self.handlers[name]

    async def update(self, timeout: float = 10.0) -> list[str]:
        """Tell the coordinator what this agent declares now (capabilities added with
        ``capability`` or removed with ``withdraw`` since it connected), on the open
        connection: calls in flight go on, new calls are routed by the new set
        (docs/protocol.md §15). Returns the capability names registered; a refusal raises
        the coordinator's error (the agent stays connected with what it had)."""
        if not self.handlers:
            raise ValueError(f"agent {self.name!r} would declare no capability; to stop "
                             f"serving, close() it")
        if self._out is None or not self.online.is_set():
            raise RuntimeError(f"agent {self.name!r} is not connected; what it declares is "
                               f"sent when it connects")
        answered: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self._updates.append(answered)
        self._out.post(p.dump(self._register()))
        return await asyncio.wait_for(answered, timeout)

    def _on_welcome(self, capabilities: list[str], refused: Any) -> None:
        while self._updates:
            answered = self._updates.popleft()
            if answered.done():  # timed out: the next answer is the next update's
                continue
            if refused is None:
                answered.set_result(capabilities)
            else:
                answered.set_exception(from_wire(refused.model_dump()))
            return

    async def _session(self, endpoints: Endpoints) -> None:
        register = self._register()
        # An answer other than welcome is retried, as a lost connection is.
        ws, frame, target = await dial_any(endpoints, register,
                                           max_frame_bytes=self.max_frame_bytes,
                                           unexpected=ReachError)
        try:
            moved = endpoints.connected(target)
            self.url = target.url
            if moved is not None:  # once per move; tries that fail on the way are not logged
                log.warning("agent %s: coordinator %s lost, registered with %s instead",
                            self.name, moved, target)
            self.agent_id = frame.agent_id
            self._on_welcome(list(frame.capabilities), None)  # an update lost with the link
            self.heartbeat_interval = frame.heartbeat_interval
            self.probe_interval = frame.probe_interval
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
                await inbound.read(ws, self._on_frame)
            finally:
                self._lost_connection()  # what came in on it is not answered on the next
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

    def _post_text(self, text: str) -> None:
        # Replies come from handlers and timers that close() ends before it drops the outbox;
        # one that came later would be dropped here, not raised.
        if self._out is not None:  # pragma: no branch — see above: never None when called
            self._out.post(text)

    async def _get_client(self) -> Client:
        # Handlers starting together share one connection (the lock), made on first use.
        async with self._client_lock:
            if self._client is None:
                assert self.url is not None
                # The coordinator the agent is on first (calls stay there), then the others.
                at = self.urls.index(self.url)
                self._client = await Client.connect(self.urls[at:] + self.urls[:at],
                                                    caller=self.name, token=self.token)
            return self._client

