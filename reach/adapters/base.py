"""What every adapter agent shares: its declaration, its membership, its calls in flight.

An adapter is an ``AgentLink`` for an agent that does not speak Reach (an HTTP service, a
command-line tool, a queue worker). The coordinator drives it: ``reach.attach(adapter)``
registers it under its name, like a websocket agent's ``register`` frame, and from then on
the gateway hands it ``Work`` exactly as it hands work to a websocket session, with the same
timeouts, retries, breakers, dead letters and traces. Subclasses say only how one call is
carried (``invoke``) and how the agent's health is checked (``check``); what an outcome
*means* is decided by the gateway's policy from the kind the adapter reports:

- ``ok`` — a result;
- ``error`` with ``details.answer`` — a deliberate answer (``answer()``): final, never retried,
  not held against the agent, like HTTP 4xx;
- ``error`` without it — a fault of the agent (``fault()``): counted by its breaker, retried
  elsewhere for idempotent work, like 5xx;
- ``undelivered`` — nothing reached the agent (``Undelivered``: connection refused, no
  responder): the gateway fails over at once, even for work that is not idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import ValidationError

from reach.core import names
from reach.core.agents import AgentRecord
from reach.core.schemas import MAX_SCHEMA_BYTES, schema_of
from reach.core.traces import child_traceparent
from reach.ports import Clock, Reply, Work
from reach.wire.protocol import CapabilitySpec

log = logging.getLogger("reach.adapters")
_SPEC_FIELDS = frozenset(CapabilitySpec.model_fields)


class Undelivered(Exception):  # noqa: N818 — a report, not a failure of the adapter
    """Raised by ``invoke`` when the work provably never reached the agent."""


class AdapterFault(Exception):  # noqa: N818
    """Raised by ``invoke`` for a fault whose wire error carries details."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class AdapterAnswer(Exception):  # noqa: N818
    """Raised by ``invoke`` for a deliberate answer (never retried, not a fault);
    ``wire_code`` is its wire code (``invalid_params``: params the adapter refuses to carry;
    a ``code`` in ``details`` is the agent's own and stays a detail)."""

    def __init__(self, message: str, *, wire_code: str = "task_failed", **details: Any) -> None:
        super().__init__(message)
        self.wire_code = wire_code
        self.details = details


@dataclass(slots=True)
class Declared:
    """One capability of an adapter: what it declares to routing, and how it is carried."""

    spec: CapabilitySpec
    how: dict[str, Any] = field(default_factory=dict)  # the adapter's own keys (path, argv, …)


def declare(agent: str, capabilities: Mapping[str, Any] | Iterable[Any],
            own: frozenset[str]) -> dict[str, Declared]:
    """Split each capability entry into its ``CapabilitySpec`` and the adapter's own keys.

    ``capabilities`` maps a name to its entry (a dict of spec fields such as ``params``,
    ``idempotent``, ``latency_ms`` and the adapter's keys ``own``); a ``CapabilitySpec`` may
    stand in for an entry with no adapter keys. Raises ``ValueError`` naming the capability and
    the key, so a file of declarations is fixed in one reading."""
    if not isinstance(capabilities, Mapping):
        capabilities = {spec.name: spec for spec in list[Any](capabilities)}
    if not capabilities:
        raise ValueError(f"agent {agent!r} declares no capabilities")
    out: dict[str, Declared] = {}
    for name, entry in capabilities.items():
        if isinstance(entry, CapabilitySpec):
            out[name] = Declared(entry.model_copy(update={"name": name}))
            continue
        if not isinstance(entry, Mapping):
            raise ValueError(f"agent {agent!r}, capability {name!r}: expected a table of "
                             f"settings, got {type(entry).__name__}")
        unknown = sorted(set(entry) - _SPEC_FIELDS - own - {"name"})
        if unknown:
            raise ValueError(
                f"agent {agent!r}, capability {name!r}: unknown key(s) {unknown}; allowed: "
                f"{sorted((_SPEC_FIELDS | own) - {'name'})}")
        spec_part = {k: v for k, v in entry.items() if k in _SPEC_FIELDS}
        spec_part["name"] = name
        if spec_part.get("returns") is not None:  # a pydantic model, as the SDK takes
            try:
                spec_part["returns"] = schema_of(spec_part["returns"])
            except TypeError as exc:
                raise ValueError(f"agent {agent!r}, capability {name!r}: returns: "
                                 f"{str(exc).replace('params', 'returns', 1)}") from None
        try:
            spec = CapabilitySpec.model_validate(spec_part)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ValueError(f"agent {agent!r}, capability {name!r}: {where}: "
                             f"{first['msg']}") from None
        out[name] = Declared(spec, {k: v for k, v in entry.items() if k in own})
    for name in out:
        try:
            names.normalize(name)
        except ValueError as exc:
            raise ValueError(f"agent {agent!r}: {exc}") from None
    return out


class Membership:
    """An attached adapter's place in the registry: its record, the beats that keep it
    online, and the coordinator's probes (``reach.gateway.probing.Probes``) that schedule
    and judge its health checks (the coordinator builds it in ``reach.attach``)."""

    def __init__(self, registry: Any, record: AgentRecord, clock: Clock,
                 heartbeat_interval: float, probes: Any = None) -> None:
        self._registry = registry
        self.record = record
        self.clock = clock
        self.heartbeat_interval = heartbeat_interval
        self.probes = probes

    def alive(self, link: Any, inflight: int = 0, queue_depth: int = 0,
              load: float = 0.0) -> None:
        """A sign of life from ``link``, counted exactly as a websocket agent's heartbeat (none
        once another connection holds the record: its beats are its own)."""
        if self.record.link is link:
            self._registry.heartbeat(self.record, self.clock.wall(), inflight=inflight,
                                     queue_depth=queue_depth, load=load)

    def update(self, link: Any, specs: list[CapabilitySpec]) -> None:
        """``link``'s agent declares ``specs`` now (an MCP server's tools changed): the same
        record is registered again with the same link, so counters, breaker and calls in
        flight stay (docs/protocol.md "Updating a registration")."""
        record = self.record
        if record.link is not link:
            return
        self._registry.register(
            agent_id=record.agent_id, name=record.name, version=record.version,
            max_concurrency=record.max_concurrency, specs=specs, link=link,
            now=self.clock.wall(), instance=record.instance, kind=record.kind,
            heartbeat_interval=record.liveness.interval, node=record.node)

    def probed(self, link: Any, probe_id: int, ok: bool, detail: str = "") -> None:
        """The health check that carried probe ``probe_id`` ended (``ok``: it passed)."""
        if self.probes is not None:
            self.probes.answered(self.record, link, probe_id, ok, detail)

    def gone(self, link: Any) -> None:
        """``link`` can no longer reach its agent at all (closed): suspected at once — unless
        the record is no longer its (a websocket agent took the name over meanwhile)."""
        if self.record.link is link:
            self._registry.disconnected(self.record, self.clock.wall())


class Adapter(ABC):
    """An agent reached through something other than Reach's websocket protocol.

    Subclasses set ``kind`` and ``OWN_KEYS`` (the per-capability keys they read) and implement
    ``invoke`` and ``check``; ``open``/``shut`` start and release their client or process."""

    kind: ClassVar[str] = "adapter"
    OWN_KEYS: ClassVar[frozenset[str]] = frozenset()
    # The largest params schema the coordinator compiles (``Settings.max_schema_bytes``;
    # ``reach.attach`` sets it before ``open``): an adapter that builds schemas from what it
    # reads (OpenAPI) stops building one past it.
    max_schema_bytes: int = MAX_SCHEMA_BYTES

    def __init__(self, name: str, capabilities: Mapping[str, Any] | Iterable[Any], *,
                 max_concurrency: int = 16, version: str = "0",
                 health_interval: float | None = None) -> None:
        if not name or not isinstance(name, str):
            raise ValueError("an adapter agent needs a name")
        if max_concurrency < 1:
            raise ValueError(f"agent {name!r}: max_concurrency must be at least 1")
        self.name = name
        self.version = version
        self.max_concurrency = max_concurrency
        self.capabilities = declare(name, capabilities, self.OWN_KEYS)
        # The gateway names capabilities as the registry normalized them.
        self._routed = {names.normalize(n): d for n, d in self.capabilities.items()}
        self.health_interval = health_interval  # None: the coordinator's heartbeat interval
        self.membership: Membership | None = None
        self._calls: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._probing: set[asyncio.Task[None]] = set()
        self._closed = False

    # ------------------------------------------------------------ what subclasses say

    @abstractmethod
    async def invoke(self, work: Work, how: dict[str, Any], reply: Reply) -> Any:
        """Carry one call; return its result. Raise ``Undelivered`` when nothing reached the
        agent, ``AdapterAnswer`` for a deliberate answer, anything else for a fault. May call
        ``reply.ack()`` once the agent has the work, and ``reply.chunk`` to stream."""

    @abstractmethod
    async def check(self) -> bool:
        """One health check: is the agent there to take work? (Bounded by the caller.)"""

    async def open(self) -> None:  # noqa: B027 — optional hook, nothing to start by default
        """Start the client, connection or process (before the first call)."""

    async def shut(self) -> None:  # noqa: B027 — optional hook
        """Release what ``open`` started (after the last call)."""

    def describe(self) -> dict[str, Any]:
        """Where the agent is, for views and logs (url, argv, subject…)."""
        return {}

    # ------------------------------------------------------------ lifecycle (reach.attach)

    @property
    def specs(self) -> list[CapabilitySpec]:
        return [d.spec for d in self.capabilities.values()]

    async def first_check(self, bound: float) -> bool:
        """The check made before the agent is registered: online at once, or suspected."""
        return await self._check_once(bound)

    def watch(self, membership: Membership) -> None:
        """Registered: from now on the agent's liveness follows its health checks. They are
        the coordinator's probes of this agent (one rule for every kind of agent): sent every
        ``health_interval`` (default: the heartbeat interval), each passing check a beat,
        two slow or failing ones in a row → suspected until a fast one passes."""
        if membership.probes is None:
            raise ValueError("an adapter is watched through the coordinator's probes")
        self.membership = membership
        self._closed = False
        membership.probes.track(membership.record, self, membership.heartbeat_interval,
                                exact=True)

    async def drained(self, grace: float) -> None:
        """Wait until no call is in flight, or ``grace`` seconds have passed."""
        calls = list(self._calls.values())
        if calls:
            await asyncio.wait(calls, timeout=grace)

    async def _check_once(self, bound: float) -> bool:
        return await self._failed_check(bound) is None

    async def _failed_check(self, bound: float) -> str | None:
        """One check within ``bound`` s: None when it passed, else what went wrong, in the
        adapter's words (the exception's text, as a probe failure's detail)."""
        try:
            if await asyncio.wait_for(self.check(), max(bound, 0.001)):
                return None
            return "health check failed"
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            return f"health check not answered within {bound:g} s"
        except Exception as exc:  # a failed check is a missed beat, never a crash
            return str(exc) or type(exc).__name__

    def probe(self, probe_id: int) -> bool:
        """Carry probe ``probe_id``: run one health check (``ProbeLink``)."""
        if self._closed or self.membership is None:
            return False
        task = asyncio.get_running_loop().create_task(
            self._probe(self.membership, probe_id), name=f"reach-probe-{self.name}")
        self._probing.add(task)
        task.add_done_callback(self._probing.discard)
        return True

    async def _probe(self, membership: Membership, probe_id: int) -> None:
        failed = await self._failed_check(membership.heartbeat_interval)
        if failed is None:
            membership.alive(self, len(self._calls))
        membership.probed(self, probe_id, failed is None, failed or "")

    async def close(self, reason: str = "detached") -> None:
        """End the link: in-flight calls are lost to the gateway (which judges them), the
        health watch stops and the client or process is released."""
        if self._closed:
            return
        self._closed = True
        if self.membership is not None and self.membership.probes is not None:
            self.membership.probes.forget(self.membership.record, self)
        for task in list(self._probing):
            task.cancel()
        await asyncio.gather(*self._probing, return_exceptions=True)
        calls = list(self._calls.values())
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        if self.membership is not None:
            self.membership.gone(self)
        await self.shut()

    # ------------------------------------------------------------ ports.AgentLink

    def deliver(self, work: Work, reply: Reply) -> bool:
        declared = self._routed.get(work.capability)
        if self._closed or declared is None:
            return False
        key = (work.task_id, work.attempt)
        self._calls[key] = asyncio.get_running_loop().create_task(
            self._run(work, declared, reply), name=f"reach-call-{work.task_id}")
        return True

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        # (the call is aborted either way: an adapter keeps no key cache a resend could hit)
        call = self._calls.pop((task_id, attempt), None)
        if call is not None and not call.done():
            call.cancel()

    async def _run(self, work: Work, declared: Declared, reply: Reply) -> None:
        reply.ack()
        try:
            result = await self.invoke(work, declared.how, reply)
        except asyncio.CancelledError:
            reply.resolve("lost")  # ignored when the gateway cancelled it (already decided)
            raise
        except Undelivered as exc:
            reply.resolve("undelivered", str(exc))
        except AdapterAnswer as exc:
            reply.resolve("error", answer(self.name, str(exc), exc.wire_code,
                                          **exc.details))
        except AdapterFault as exc:
            reply.resolve("error", fault(self.name, str(exc), **exc.details))
        except Exception as exc:
            reply.resolve("error", fault(self.name, f"{type(exc).__name__}: {exc}"))
        else:
            reply.resolve("ok", result)
        finally:
            self._calls.pop((work.task_id, work.attempt), None)


def answer(agent: str, message: str, wire_code: str = "task_failed", /, **details: Any
           ) -> dict[str, Any]:
    """The wire error of a deliberate answer (docs/protocol.md §6)."""
    return {"code": wire_code, "message": message,
            "details": {**details, "answer": True, "agent": agent}}


def fault(agent: str, message: str, **details: Any) -> dict[str, Any]:
    """The wire error of a fault of the agent."""
    return {"code": "task_failed", "message": message, "details": {**details, "agent": agent}}


def traceparent_of(work: Work) -> str | None:
    """The W3C ``traceparent`` an adapter hands its agent for ``work`` (the task as parent
    span, the caller's flags kept); None for a caller-chosen trace id that is not W3C."""
    return child_traceparent(work.trace_id, work.task_id, work.traceparent)
