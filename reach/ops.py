"""The operator surface: agents, dead letters and replay, drain, breakers, traces, metrics.

``Ops`` is what ``Reach``'s operator methods delegate to and what the admin feed's session
reads (it implements ``reach.server.services.Operator``). Admin commands are a table of
handlers (``reach.ops_commands.COMMANDS``: action → handler), so a new command is one
function and one row.
Reading here never blocks routing: every view is built from memory in one step.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from reach import settling
from reach._version import __version__
from reach.config import Settings
from reach.core import names, traces
from reach.core.agents import AgentRecord
from reach.core.registry import Registry
from reach.core.tasks import Task, TaskState
from reach.errors import InvalidParams
from reach.gateway import cancelling
from reach.gateway.book import earlier_errors
from reach.gateway.events import ADMIN, AGENT
from reach.gateway.gateway import Gateway
from reach.lookup import Lookup, TraceStore, task_events
from reach.ops_commands import COMMANDS
from reach.ports import Clock
from reach.server.display import AgentList, TraceView


class Ops:
    """One coordinator's operator surface, over its gateway and registry."""

    def __init__(self, settings: Settings, gateway: Gateway, registry: Registry,
                 clock: Clock, store: TraceStore | None = None) -> None:
        self.settings = settings
        self.lookup = Lookup(settings, gateway, store)
        self.gateway = gateway
        self.registry = registry
        self.clock = clock
        self.url = ""  # set once the coordinator listens
        self.node_id = settings.node_id or ""  # this node (the coordinator sets the one made)
        self.started_at = 0.0
        self._auto_replayed: set[str] = set()
        self.alerting: Any = None  # reach.server.alerting.Alerting, with alert rules
        self.cluster: Any = None  # reach.membership.ClusterNode, in a cluster
        self.discarded = settling.Discarded(settings.dead_letters_max)  # settled letters
        self.phrases: Any = None  # reach.phrasebook.PhraseBook: intent routing's learned phrases
        self.pushes: Any = None  # reach.server.pushes.Pusher: the coordinator's one sender

    def coordinator(self) -> dict[str, Any]:
        """Where and what this coordinator is (the snapshot's ``coordinator`` object)."""
        return {"url": self.url, "version": __version__, "started_at": self.started_at,
                "store": self.settings.store, "node": self.node_id}

    def trust_warnings(self, open_mode: bool, url: str) -> list[str]:
        """What an operator must know about how open the coordinator at ``url`` is."""
        s, out = self.settings, []
        if open_mode:
            out.append(f"open mode: no tokens, so any process that reaches {url} may "
                       f"register agents and call capabilities under any name"
                       + ("" if not s.insecure else
                          " — and it is bound beyond loopback (insecure=True)")
                       + "; configure tokens (docs/security.md)")
        elif s.serves is None:
            out.append("tokens without serve rules: every token holder may register as an "
                       "agent and serve any capability; pass serves={agent: patterns}")
        return out

    # ------------------------------------------------------------ agents

    def agents(self, *, names: set[str] | None = None) -> AgentList:
        """Every known agent (or those named): state, load, capabilities, breaker, P95, ..."""
        now = self.clock.wall()
        records = self.registry.by_id.values() if names is None else [
            r for n in names if (r := self.registry.by_name.get(n)) is not None]
        return AgentList(self._view(r, now) for r in sorted(records, key=lambda r: r.name))

    def _view(self, record: AgentRecord, now: float) -> dict[str, Any]:
        view = record.view(now, self.gateway.metrics.p95_ms(record.name))
        view["node"] = record.node or self.node_id  # a peer's agents carry their node's id
        return view

    def _agent(self, ref: str) -> AgentRecord:
        record = self.registry.by_name.get(ref) or self.registry.by_id.get(ref)
        if record is None:
            raise InvalidParams(f"no agent named {ref!r}; see reach.agents()")
        return record

    def drain(self, agent: str) -> dict[str, Any]:
        """Stop routing new work to ``agent`` (name or id); its in-flight work finishes."""
        record = self._agent(agent)
        self.registry.deregister(record, self.clock.wall())
        return self._view(record, self.clock.wall())

    def undrain(self, agent: str) -> dict[str, Any]:
        """Route work to a drained agent again."""
        record = self._agent(agent)
        self.registry.undrain(record, self.clock.wall())
        return self._view(record, self.clock.wall())

    def reset_breaker(self, agent: str) -> dict[str, Any]:
        """Close ``agent``'s breaker and forget its window (after a fix, without waiting)."""
        record = self._agent(agent)
        before = record.breaker.state
        record.breaker.reset()
        self.gateway.breaker_moved(record, before)
        return self._view(record, self.clock.wall())

    # ------------------------------------------------------------ routing by hand

    def overrides(self) -> dict[str, Any]:
        """The operator's weight overrides and pins (reach.core.overrides)."""
        return self.gateway.router.overrides.view()

    def set_weight(self, agent: str, weight: float | None,
                   capability: str | None = None) -> dict[str, Any]:
        """Route by ``weight`` instead of what ``agent`` declared (for ``capability``, or all
        it serves); ``None`` goes back to the declared weight."""
        record = self._agent(agent)
        cap = None if capability is None else self._declared(record, capability)
        try:
            self.gateway.router.overrides.set_weight(record.name, weight, cap)
        except ValueError as exc:
            raise InvalidParams(str(exc)) from None
        return self.overrides()

    def pin(self, agent: str, capability: str) -> dict[str, Any]:
        """Route ``capability`` only to ``agent`` (and any other agent pinned for it)."""
        record = self._agent(agent)
        self.gateway.router.overrides.pin(self._declared(record, capability), record.name)
        return self.overrides()

    def unpin(self, capability: str, agent: str | None = None) -> dict[str, Any]:
        """Undo ``pin`` for ``agent`` (None: every pin of ``capability``)."""
        name = None if agent is None else self._agent(agent).name
        cap = names.normalize(capability)
        if cap not in self.gateway.router.overrides.pins:
            raise InvalidParams(f"{capability!r} is not pinned; see reach.overrides()")
        self.gateway.router.overrides.unpin(cap, name)
        return self.overrides()

    def _declared(self, record: AgentRecord, capability: str) -> str:
        cap = names.normalize(capability)
        if cap not in record.capabilities:
            raise InvalidParams(f"agent {record.name!r} does not serve {capability!r}; it "
                                f"serves {', '.join(sorted(record.capabilities))}")
        return cap

    def metrics(self) -> dict[str, Any]:
        """Calls, faults, answers, retries, rejections, in-flight and latency percentiles, per
        capability, per agent and in total (docs/admin-feed.md, "Metrics"); ``backlog``: per
        capability, the tasks waiting their turn and the oldest one's age; a cluster's
        node adds ``cluster``: the counters of every node summed, and each node's totals."""
        snap = self.gateway.metrics.snapshot()
        # The backlog: tasks accepted and waiting their turn, and the oldest one's age
        waiting = self.gateway.book.backlog.view(self.gateway.clock.wall())
        snap["backlog"] = {cap: {"waiting": n, "oldest_s": round(age, 3)}
                           for cap, (n, age) in sorted(waiting.items())}
        if self.cluster is not None:  # a cluster's node: the whole cluster's counters too
            snap["cluster"] = self.cluster.metrics()
        return snap

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts firing now, as the admin feed's ``AlertView`` (docs/alerts.md)."""
        return [] if self.alerting is None else list(self.alerting.active())

    # ------------------------------------------------------------ dead letters and replay

    def dead_letters(self, *, capability: str | None = None, agent: str | None = None,
                     error: str | None = None, since: float | None = None,
                     until: float | None = None, discarded: bool = False
                     ) -> list[dict[str, Any]]:
        """Unresolved dead letters (envelope, error, attempts), oldest first; a letter being
        replayed stays listed (its ``state`` says so) until the replay succeeds. Filters: the
        capability, an agent that made an attempt, a substring of the error (any case), and
        the time it became a dead letter. ``discarded=True``: the discarded ones instead."""
        return [_letter(t) for t in self._letters(capability, agent, error, since, until,
                                                  discarded)]

    def dead_letter(self, task_id: str) -> dict[str, Any] | None:
        task = self.gateway.dead.get(task_id)
        return None if task is None else _letter(task)

    def _letters(self, capability: str | None, agent: str | None, error: str | None,
                 since: float | None, until: float | None, discarded: bool = False
                 ) -> list[Task]:
        needle = None if error is None else error.lower()
        out = []
        pool = self.discarded.tasks if discarded else self.gateway.dead
        for task in sorted(pool.values(), key=lambda t: t.envelope.created_at):
            if capability is not None and task.envelope.capability != capability:
                continue
            if agent is not None and not any(agent in (a.agent, a.agent_id)
                                             for a in task.attempts):
                continue
            if needle is not None and needle not in json.dumps(task.error).lower():
                continue
            if since is not None and task.updated_at < since:
                continue
            if until is not None and task.updated_at > until:
                continue
            out.append(task)
        return out

    async def _dead(self, task_id: str) -> Task:
        task = self.gateway.dead.get(task_id) or self.discarded.tasks.get(task_id)
        if task is None:
            task = await self.gateway.task(task_id)
        if task is None or task.state is not TaskState.DEAD:
            raise InvalidParams(f"{task_id!r} is not an unresolved dead letter; "
                                f"see reach.dead_letters()")
        return task

    async def discard(self, task_id: str, *, reason: str, by: str = "python"
                      ) -> dict[str, Any]:
        """Settle a dead letter that can never succeed: kept whole with ``reason`` (and who
        and when), audited, gone from ``dead_letters()`` (``discarded=True`` lists it)."""
        task = await self._dead(task_id)
        settling.discard(self.gateway, self.discarded, task, reason, by, self.clock.wall())
        if by == "python":  # the admin feed's session records its own commands
            self.record("discard", {"task_id": task_id, "reason": reason}, True)
        return _letter(task)

    async def replay(self, task_id: str, *, wait: float | None = None,
                     params: dict[str, Any] | None = None, timeout: float | None = None,
                     by: str = "python") -> dict[str, Any]:
        """Run a dead letter again, with new ``params`` (checked against the capability's
        schema) and/or ``timeout`` if given (its history records the change and by whom);
        returns its view once it ends (or after ``wait`` s). A letter past the retention (or
        the in-memory cap) is found in the store."""
        task = await self._dead(task_id)
        if self.cluster is not None and not await self.cluster.claim(task_id):
            raise InvalidParams(f"{task_id!r} is no longer a dead letter: another node of the "
                                f"cluster replayed it; see reach.task({task_id!r})")
        if params is not None or timeout is not None:
            settling.amend(self.gateway, task, params, timeout, by, self.clock.wall())
            await self.gateway.store.amend(task)
        self.discarded.tasks.pop(task_id, None)
        self.gateway.replay(task)
        fut = self.gateway.outcome(task_id)
        if fut is not None:  # pragma: no branch — replay() made the task live just now
            try:
                async with asyncio.timeout(wait):
                    await asyncio.shield(fut)
            except TimeoutError:
                pass
        return task.view()

    def replay_many(self, *, capability: str | None = None, agent: str | None = None,
                    error: str | None = None, since: float | None = None,
                    until: float | None = None) -> list[str]:
        """Replay every dead letter matching the filter (as ``dead_letters``); returns their
        task ids at once. Each is a tracked task: follow it with ``task()`` or ``trace()``."""
        letters = [t for t in self._letters(capability, agent, error, since, until)
                   if t.state is TaskState.DEAD and not self._foreign(t)]  # not replaying
        for task in letters:
            self.gateway.replay(task)
        return [t.task_id for t in letters]

    async def push_dead_letters(self) -> list[dict[str, Any]]:
        """The task notifications (A2A pushes, completion webhooks) that were not delivered,
        oldest first (docs/a2a.md, docs/webhooks.md); in a cluster, every node's."""
        return list(await self._pusher().letters())

    async def replay_pushes(self, task_id: str | None = None) -> list[str]:
        """Send them again, each with its tries (``task_id``: that task's only, kept by any
        node of a cluster; else this node's); the ids of their tasks. Their outcomes arrive
        later (``push_dead_letters``)."""
        pusher = self._pusher()
        if self.cluster is not None:
            if task_id is not None:
                return list(await pusher.claim(task_id))
            await pusher.letters()  # (drops this node's letters another node replayed)
        return list(pusher.replay(task_id))

    def _pusher(self) -> Any:
        if self.pushes is None:
            raise InvalidParams("this coordinator has no notification sender")
        return self.pushes

    def _foreign(self, task: Task) -> bool:
        """A dead letter another node owns: replayed one at a time (``replay`` claims it
        first); a filtered replay or auto-replay here leaves it to its owner."""
        return self.cluster is not None and task.task_id in self.cluster.foreign_dead

    def agent_changed(self, record: AgentRecord) -> None:
        """A registry listener: publish the change, and with ``auto_replay``, replay the dead
        letters of a capability that just got a healthy agent (each letter at most once)."""
        self.gateway.events.publish(AGENT, {"agent": record.name, "agent_id": record.agent_id,
                                            "state": record.state.value})
        if not (self.settings.auto_replay and record.reachable):
            return
        for task in list(self.gateway.dead.values()):
            if (task.state is TaskState.DEAD and task.envelope.capability in record.capabilities
                    and task.task_id not in self._auto_replayed and not self._foreign(task)):
                self._auto_replayed.add(task.task_id)
                self.gateway.replay(task)

    # ------------------------------------------------------------ tasks and traces

    def traces(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Summaries of the most recent traces, newest first."""
        limit = self.settings.recent_traces if limit is None else limit
        ids = list(self.gateway.traces)[-limit:] if limit > 0 else []
        return [self.trace_summary(t) for t in reversed(ids)]

    def _trace_tasks(self, trace_id: str) -> list[Task]:
        return [t for tid in self.gateway.traces.get(trace_id, ())
                if (t := self.gateway.find(tid)) is not None]

    def trace_summary(self, trace_id: str) -> dict[str, Any]:
        return traces.summary(trace_id, self._trace_tasks(trace_id))

    def trace(self, trace_id: str) -> TraceView:
        """The ordered events of one call chain (every task's transitions, with times); the
        result also carries ``.hops`` (per-hop timings: queued, delivered, processing, retry,
        done), ``.tasks`` and ``.summary``, and renders as a timeline in a notebook."""
        tasks = self._trace_tasks(trace_id)
        events: list[dict[str, Any]] = []
        for task in tasks:
            events.extend(task_events(task))
        events.sort(key=lambda e: e["at"])
        return TraceView(events, traces.timeline(trace_id, tasks))

    async def task(self, task_id: str) -> dict[str, Any] | None:
        """A task's full view, from memory or the store."""
        task = await self.gateway.task(task_id)
        return None if task is None else task.view()

    async def cancel(self, task_id: str, *, reason: str = "", by: str = "operator"
                     ) -> dict[str, Any]:
        """Cancel a live task as an operator (any caller's): it ends ``cancelled`` and its
        agent is told to stop. A task that ended already is answered as it ended."""
        task = await self.gateway.task(task_id)
        if task is None:
            raise InvalidParams(f"no task {task_id!r}; see reach.find() for a head of an id")
        return cancelling.cancel_known(self.gateway, task, by, reason).view()

    async def find_trace(self, trace_id: str) -> TraceView:
        """``trace()`` for any trace, also one memory no longer holds (read from the store)."""
        return await self.lookup.find_trace(trace_id)

    async def find(self, ident: str) -> dict[str, Any]:
        """Go to a task or trace by id, or by a head of one (reach.lookup.Lookup.find)."""
        return await self.lookup.find(ident)

    # ------------------------------------------------------------ admin commands

    async def command(self, action: str, args: dict[str, Any]) -> Any:
        """Run one admin-feed command (docs/admin-feed.md, "Commands")."""
        handler = COMMANDS.get(action)
        if handler is None:
            raise InvalidParams(f"unknown admin action {action!r}; see docs/admin-feed.md")
        return await handler(self, args)

    def act(self, action: str, **args: Any) -> dict[str, Any]:
        """Run the operator method ``action`` for a Python caller, recorded as the admin feed's
        command of that name would be."""
        try:
            result: dict[str, Any] = getattr(self, action)(**args)
        except BaseException:
            self.record(action, args, False)
            raise
        self.record(action, args, True)
        return result

    def record(self, action: str, args: dict[str, Any], ok: bool) -> None:
        """Record an operator's action as an event (and a JSON log line when enabled)."""
        self.gateway.events.publish(ADMIN, {"action": action, "args": args, "ok": ok})
        if self.gateway.audit is not None:  # the audit log, when kept (principal "admin")
            self.gateway.audit.admin(action, args, ok)


def _letter(task: Task) -> dict[str, Any]:
    env = task.envelope
    return {"task_id": task.task_id, "capability": env.capability, "caller": env.caller,
            "agent": task.attempts[-1].agent if task.attempts else None,
            "state": task.state.value, "envelope": env.to_dict(), "error": task.error,
            "attempts": [a.to_dict() for a in task.attempts], "dead_since": task.updated_at,
            "earlier_errors": earlier_errors(task), "discarded": settling.discard_of(task)}
