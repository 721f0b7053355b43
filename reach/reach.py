"""``Reach``: one coordinator — store, registry, router, gateway and websocket edge, wired.

    reach = await Reach.start()                     # in-memory SQLite, 127.0.0.1, free port
    async with Reach.start(store="sqlite:///reach.db") as reach: ...

Settings become parts here, and parts are started and stopped here; what an operator can ask
and do lives in reach.ops (``Reach``'s operator methods delegate to it), the websocket and HTTP
edge in reach.server. Nothing here blocks the event loop or calls ``asyncio.run``, so it works
under top-level ``await`` in Jupyter. Two instances in one process share nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from websockets.asyncio.server import Server

from reach import attached, doors
from reach.adapters.base import Adapter
from reach.alert_rules import AlertConfig, load_alerts
from reach.cluster.node import Node
from reach.config import Settings
from reach.core.liveness import LivenessPolicy, StallGuard
from reach.core.registry import Registry
from reach.core.routing import Router
from reach.core.trust import Trust
from reach.gateway import admission
from reach.gateway.audit import Audit
from reach.gateway.clock import LoopClock
from reach.gateway.events import log_json
from reach.gateway.gateway import Gateway
from reach.membership import ClusterNode
from reach.ops import Ops
from reach.phrasebook import PhraseBook
from reach.ports import Clock
from reach.reach_ops import OperatorSurface
from reach.sdk.opening import Opening
from reach.server import otel
from reach.server.alerting import Alerting
from reach.server.audit import AuditWriter
from reach.server.channel import Channel
from reach.server.display import reach_html
from reach.server.front import FrontDoor
from reach.server.http import listen
from reach.server.identities import Identities
from reach.server.intent_index import IntentIndexer
from reach.server.logthrottle import LogThrottle
from reach.server.openfiles import fit_open_files
from reach.server.services import Services
from reach.store.store import Store

log = logging.getLogger("reach")
_SETTING_NAMES = frozenset(f.name for f in fields(Settings))


class Reach(OperatorSurface):
    """The coordinator. Create it with ``await Reach.start(...)``; every timing is an argument."""

    def __init__(self, settings: Settings | None = None, *,
                 clock: Callable[[], float] | Clock = time.time, seed: int | None = None) -> None:
        # Open files: the soft limit goes up to the hard one, and the connection caps come
        # down to what fits under it with a reserve kept back (reach.server.openfiles).
        self.capacity, s = fit_open_files(settings or Settings())
        self.settings = s
        # One line per kind per second from the libraries' loggers (reach.server.logthrottle),
        # on while this coordinator runs.
        self.log_throttle = LogThrottle()
        # One time base for every part: a wall-time function (as before) or a whole Clock.
        self.clock: Clock = LoopClock(clock) if callable(clock) else clock
        # In a cluster the store is this node's: its tasks are owned by it (docs/cluster.md).
        self.store = Store(s.store, s.sqlite_synchronous,
                           node_id=s.node_id if s.cluster else None,
                           key_ttl=s.idempotency_ttl, wall=self.clock.wall)
        self.registry = Registry(LivenessPolicy(s.heartbeat_interval, s.suspect_after,
                                                s.offline_after), s.breaker_open_for,
                                 max_schema_bytes=s.max_schema_bytes, warmup=s.warmup)
        rng = random.Random(seed)
        self.trust = Trust.of(s.tokens, s.permissions, s.serves)
        self.router = Router(strategy=s.strategy, rng=rng, permissions=self.trust.calls,
                             high_water=s.high_water, shed_below=s.shed_below)
        self.gateway = Gateway(s, self.registry, self.router, self.store, self.clock, rng)
        self.events = self.gateway.events
        self.ops = Ops(s, self.gateway, self.registry, self.clock, store=self.store)
        self.identities = Identities(self.registry, self.gateway, self.store, self.clock)
        # Intent routing's learned phrases, kept in the store (reach.phrasebook).
        self.intent_index = IntentIndexer(self.registry)  # off the loop when big
        self.ops.phrases = PhraseBook(self.registry, self.store)
        self.gateway.on_learned = self.ops.phrases.kept
        # Without a configured token the admin feed still needs one: a random one, readable
        # here and printed by `reach serve`, so an open port never means an open admin feed.
        self.admin_token: str = s.admin_token or secrets.token_urlsafe(18)
        self.node = Node.of(s, self.registry, self.clock, self.gateway.known,
                            self.admin_token, rng, self.trust)  # the cluster: ``reach.peers``
        self.peers, self.ops.node_id = self.node.peers, self.node.node_id
        self.store.on_lost = self._lost
        self.cluster: ClusterNode | None = None  # the lease and take-over loop, once started
        self.intent_routing: Any = None  # the model extra (docs/intent.md), when asked for
        if s.intent_model:
            from reach.server.intent_routing import ModelRouting
            self.intent_routing = ModelRouting(self.registry)  # ImportError: names the extra
        # The one sender of task notifications: A2A pushes and webhooks (docs/webhooks.md).
        self.pusher, self.notify = doors.sender(s, self.gateway, self.store, self.trust,
                                                self.clock)
        self.channel = Channel(Services(
            settings=s, gateway=self.gateway, registry=self.registry, trust=self.trust,
            clock=self.clock, identities=self.identities, operator=self.ops,
            admin_token=self.admin_token, node=self.node,
            intent_routing=self.intent_routing, notify=self.notify), self.capacity)
        self.registry.listen(self.ops.agent_changed)
        # The REST front door (docs/http-api.md): its own port, the same gateway and trust.
        self.front = None if s.http_port is None else FrontDoor(self.channel.services)
        # The MCP and A2A doors (docs/mcp.md, docs/a2a.md), on the front door's port.
        self.mcp, self.a2a = doors.protocol_doors(s, self.front, self.pusher)
        self.ops.pushes = self.pusher
        if s.json_logs:
            self.events.listen(log_json)
        self.audit = None if s.audit_log is None else AuditWriter(s.audit_log)
        # OpenTelemetry export (docs/otel.md): the SDK is imported only when it is configured.
        self.otel = None if s.otel_endpoint is None else otel.span_export(
            self.events, self.gateway.find, s.otel_endpoint, s.otel_service_name, self.node.node_id)
        if self.audit is not None:
            self.gateway.audit = Audit(self.clock, self.audit.put, self.registry,
                                       include_params=s.audit_params)
        # Alert rules (docs/alerts.md): a bad rules file fails here, before anything starts.
        self.alerting: Alerting | None = None
        if s.alerts is not None:
            rules = s.alerts if isinstance(s.alerts, AlertConfig) else load_alerts(s.alerts)
            self.alerting = Alerting(rules, self.gateway, self.registry, self.clock,
                                     random.Random(None if seed is None else seed + 1),
                                     lambda: self.url, lambda: (
                                         d.task.envelope.capability for d in self.pusher.dead))
        self.ops.alerting = self.alerting
        self._server: Server | None = None
        self._loops: list[asyncio.Task[None]] = []
        self.adapters: dict[str, Adapter] = {}  # attached agents, by name
        self._port = s.port
        self.started = False

    @classmethod
    def start(cls, settings: Settings | None = None, *,
              clock: Callable[[], float] | Clock = time.time,
              seed: int | None = None, **options: Any) -> Opening[Reach]:
        """Start a coordinator. Options are ``Settings`` fields (``store``, ``port``,
        ``heartbeat_interval``, ``suspect_after``, ``offline_after``, ``ack_timeout``, ...)."""
        unknown = set(options) - _SETTING_NAMES
        if unknown:
            raise TypeError(f"unknown Reach option(s): {sorted(unknown)}; "
                            f"see reach.Settings for the full list")
        if settings is None:
            settings = Settings(**options)
        elif options:
            raise TypeError("pass either a Settings object or keyword options, not both")
        reach = cls(settings, clock=clock, seed=seed)
        return Opening(reach, reach._open, reach.stop)

    # ------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        if self.started:
            return
        self.log_throttle.attach()
        try:
            await self._open_parts()
        except BaseException:  # (the loops start last, after every await: none runs yet)
            self.log_throttle.detach()
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
            if self.front is not None:
                await self.front.stop()
            await self.store.close()
            if self.otel is not None:
                await self.otel.stop()
            if self.audit is not None:
                await self.audit.stop()
            raise

    async def _open_parts(self) -> None:
        s = self.settings
        if self.audit is not None:  # first: a path that cannot be opened fails the start
            await self.audit.start()
        if self.otel is not None:  # before resumed tasks can finish
            await self.otel.start()
        await self.store.open()
        await self.identities.load()
        await self.ops.phrases.load()
        admission.learn(self.gateway.known, await self.store.declared())
        now = self.clock.wall()
        for task in await self.store.dead(s.dead_letters_max, now - s.dead_letter_retention):
            if not self.ops.discarded.settled(task):  # a discarded one stays out of the list
                self.gateway.book.keep_dead(task)
        self.gateway.book.bound_dead()  # the newest that fit dead_letter_bytes stay listed
        for key, task_id, created in await self.store.keys_since(
                now - s.idempotency_ttl, s.idempotency_keys_max):
            self.gateway.remember_key(key, task_id, created)
        await self.ops.lookup.restore_traces()  # the trace list survives a restart
        # Unfinished tasks are live again before anyone can connect and ask about them.
        unfinished = await self.store.unfinished()
        for task in unfinished:
            self.gateway.resume(task)
        if unfinished:
            log.info("resumed %d unfinished task(s) from %s", len(unfinished), s.store)
        await self.gateway.chains.resume(now - s.idempotency_ttl)  # a chain's next steps
        await self.notify.kind.start()  # the notify secret, made once and kept
        await self.pusher.load()  # the push configs kept for tasks, resumed ones included
        front = self.front if self.mcp is not None else None  # GET /mcp here: 307 to it
        self._server = await listen(self.channel.services, self.channel,
                                    lambda: (front.port or None) if front else None)
        self._port = self._server.sockets[0].getsockname()[1] if self._server.sockets else s.port
        if self.front is not None and s.http_port is not None:
            await self.front.start(s.host, s.http_port)
        loop = asyncio.get_running_loop()
        self._loops.append(loop.create_task(self._sweep_loop(), name="reach-liveness"))
        self._loops.append(loop.create_task(self.channel.watch_lag(), name="reach-lag"))
        self._loops.append(loop.create_task(self.gateway.probes.run(), name="reach-probes"))
        if self.alerting is not None:
            self.alerting.start()
        await self.node.start()
        if s.cluster:
            self.cluster = ClusterNode(self.node.node_id, s.lease_s, self.store, self.gateway,
                                       self.peers, self.channel, lambda: self.url)
            self.ops.cluster = self.cluster
            self.cluster.after_take_over = self.pusher.adopt  # (with a dead node's tasks)
            await self.cluster.start()
        self.ops.url = self.url
        self.ops.started_at = self.clock.wall()
        self.started = True
        for warning in self.trust_warnings():
            log.warning("%s", warning)

    def _lost(self, task_ids: list[str]) -> None:
        """The store found other nodes own these tasks now: stop driving them here."""
        self.gateway.following.let_go(task_ids)

    def trust_warnings(self) -> list[str]:
        """What an operator must know about how open this coordinator is (said at start)."""
        return self.ops.trust_warnings(self.trust.open, self.url)

    async def stop(self) -> None:
        """Stop gracefully: refuse new work, drain running tasks, close sockets, flush the store."""
        if not self.started:
            return
        self.started = False
        try:
            await self._stop_parts()
        finally:  # a part that fails or a stop cancelled midway: the process-wide filter goes
            self.log_throttle.detach()

    async def _stop_parts(self) -> None:
        self.gateway.accepting = False
        for loop_task in self._loops:
            loop_task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        if self.alerting is not None:
            await self.alerting.close()
        await self.gateway.stop(self.settings.drain_timeout)
        if self.cluster is not None:  # after the drain: what is left is the others' at once
            await self.cluster.stop()
        await self.peers.close()  # (after the drain: its attempts may ride the peer links)
        await asyncio.gather(*(a.close("coordinator stopping") for a in self.adapters.values()),
                             return_exceptions=True)
        self.adapters.clear()
        if self._server is not None:  # pragma: no branch — set whenever started is
            self._server.close()
            await self._server.wait_closed()
        if self.front is not None:
            await self.front.stop()
        await self.pusher.close()  # (after the drain: the drained tasks' notifications go)
        await self.ops.phrases.flush()
        await self.intent_index.close()
        if self.intent_routing is not None:
            await self.intent_routing.close()
        await self.store.close()
        if self.otel is not None:  # after the drain: the drained tasks' spans are flushed too
            await self.otel.stop()
        if self.audit is not None:  # last: every task's end is recorded before it closes
            await self.audit.stop()

    async def __aenter__(self) -> Reach:
        await self._open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"ws://{self.settings.host}:{self._port}"

    @property
    def http_url(self) -> str | None:
        """The REST front door, "http://HOST:PORT" (None when ``http_port=None``)."""
        if self.front is None or not self.front.port:
            return None
        return f"http://{self.settings.host}:{self.front.port}"

    @property
    def port(self) -> int:
        return int(self._port)

    @property
    def in_flight(self) -> int:
        """How many tasks this coordinator is driving now: what ``stop()`` drains (for up to
        ``drain_timeout`` seconds), said by ``reach serve`` at Ctrl-C."""
        return self.gateway.in_flight

    @property
    def mcp_url(self) -> str | None:
        """The MCP Streamable HTTP endpoint, "http://HOST:PORT/mcp" (None without mcp=True)."""
        base = self.http_url
        return None if self.mcp is None or base is None else base + "/mcp"

    @property
    def a2a_url(self) -> str | None:
        """The A2A base URL, "http://HOST:PORT/a2a": the Agent Card at
        ``<base>/.well-known/agent-card.json``, JSON-RPC at the base (None without a2a=True)."""
        base = self.http_url
        return None if self.a2a is None or base is None else base + "/a2a"

    @property
    def notify_secret(self) -> str | None:
        """The secret completion webhooks are signed with when their caller gave no token
        (docs/webhooks.md): ``notify_secret``, else the one kept in the store (once started)."""
        return self.notify.kind.secret

    @property
    def started_at(self) -> float:
        return self.ops.started_at

    async def _sweep_loop(self) -> None:
        period = max(0.005, min(1.0, self.settings.heartbeat_interval / 4))
        guard = StallGuard(period, patience=self.settings.heartbeat_interval)
        loop = asyncio.get_running_loop()
        next_prune = warned = 0.0
        while True:
            due = loop.time() + period
            await asyncio.sleep(period)
            if not guard.may_judge(due, loop.time()):
                if loop.time() >= warned:  # once a minute at most
                    warned = loop.time() + 60.0
                    log.warning("the coordinator stood still for %.2f s (a blocking call on its "
                                "event loop, a GC pause, an overloaded host?); liveness is "
                                "judged once the beats sent meanwhile are read",
                                loop.time() - due)
                continue
            now = self.clock.wall()
            self.registry.sweep(now)  # changes reach the gateway as registry events
            if now >= next_prune:
                self.gateway.prune_keys(now - self.settings.idempotency_ttl)
                self.gateway.prune_dead(now - self.settings.dead_letter_retention)
                next_prune = now + 60.0

    # ------------------------------------------------------------ adapter agents

    async def attach(self, adapter: Adapter) -> dict[str, Any]:
        """Make an agent that does not speak Reach reachable: an ``HttpAgent``,
        ``ProcessAgent`` or ``NatsAgent`` (reach.adapters) is registered under its name and
        driven by the coordinator with every guarantee a websocket agent gets. Returns its
        view, as ``reach.agents()`` shows it. Its first health check decides whether it starts
        online or suspected; either way it is attached, and recovers when the check passes."""
        return await attached.attach(self, adapter)

    async def detach(self, name: str, *, grace: float | None = None) -> None:
        """Stop routing to an attached agent, let its in-flight calls finish (up to ``grace``
        seconds, default ``drain_timeout``), then release it."""
        await attached.detach(self, name, grace)

    def identity(self, name: str) -> str:
        """The agent id for ``name``: the same one across reconnects and restarts."""
        return self.identities.identity(name)

    def _repr_html_(self) -> str:
        return reach_html(self.url, self.started, self.agents(), len(self.gateway.live),
                          len(self.gateway.dead))

