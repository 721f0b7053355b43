"""``Reach``'s operator methods: agents, drain, breakers, weights and pins, metrics, alerts,
dead letters (list, replay, discard), traces and lookups. Each delegates to the
coordinator's ``reach.ops.Ops`` (its ``ops``), which the admin feed drives as well."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reach.server.display import AgentList, TraceView

if TYPE_CHECKING:
    from reach.ops import Ops


class OperatorSurface:
    """Mixed into ``Reach``: the operator's view and repair actions, through ``self.ops``."""

    ops: Ops

    def describe(self) -> dict[str, Any]:
        return self.ops.coordinator()

    def agents(self, *, names: set[str] | None = None) -> AgentList:
        return self.ops.agents(names=names)

    def drain(self, agent: str) -> dict[str, Any]:
        return self.ops.drain(agent)

    def undrain(self, agent: str) -> dict[str, Any]:
        return self.ops.undrain(agent)

    def reset_breaker(self, agent: str) -> dict[str, Any]:
        return self.ops.reset_breaker(agent)

    def overrides(self) -> dict[str, Any]:
        return self.ops.overrides()

    def set_weight(self, agent: str, weight: float | None, capability: str | None = None
                   ) -> dict[str, Any]:
        return self.ops.act("set_weight", agent=agent, weight=weight, capability=capability)

    def pin(self, agent: str, capability: str) -> dict[str, Any]:
        return self.ops.act("pin", agent=agent, capability=capability)

    def unpin(self, capability: str, agent: str | None = None) -> dict[str, Any]:
        return self.ops.act("unpin", capability=capability, agent=agent)

    def metrics(self) -> dict[str, Any]:
        return self.ops.metrics()

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts firing now (docs/alerts.md), oldest first; [] without alert rules."""
        return self.ops.alerts()

    def dead_letters(self, *, capability: str | None = None, agent: str | None = None,
                     error: str | None = None, since: float | None = None,
                     until: float | None = None, discarded: bool = False
                     ) -> list[dict[str, Any]]:
        return self.ops.dead_letters(capability=capability, agent=agent, error=error,
                                     since=since, until=until, discarded=discarded)

    def dead_letter(self, task_id: str) -> dict[str, Any] | None:
        return self.ops.dead_letter(task_id)

    async def replay(self, task_id: str, *, wait: float | None = None,
                     params: dict[str, Any] | None = None, timeout: float | None = None
                     ) -> dict[str, Any]:
        """Run a dead letter again, with new ``params`` and/or ``timeout`` if given; its view
        once it ends (or after ``wait`` s)."""
        return await self.ops.replay(task_id, wait=wait, params=params, timeout=timeout)

    async def discard(self, task_id: str, *, reason: str) -> dict[str, Any]:
        """Settle a dead letter that can never succeed: kept whole with ``reason``, audited,
        out of ``dead_letters()`` (``discarded=True`` lists it)."""
        return await self.ops.discard(task_id, reason=reason)

    def replay_many(self, *, capability: str | None = None, agent: str | None = None,
                    error: str | None = None, since: float | None = None,
                    until: float | None = None) -> list[str]:
        return self.ops.replay_many(capability=capability, agent=agent, error=error,
                                    since=since, until=until)

    def traces(self, limit: int | None = None) -> list[dict[str, Any]]:
        return self.ops.traces(limit)

    def trace_summary(self, trace_id: str) -> dict[str, Any]:
        return self.ops.trace_summary(trace_id)

    def trace(self, trace_id: str) -> TraceView:
        return self.ops.trace(trace_id)

    async def task(self, task_id: str) -> dict[str, Any] | None:
        return await self.ops.task(task_id)

    async def cancel(self, task_id: str, reason: str = "") -> dict[str, Any]:
        """Cancel a live task (any caller's): it ends ``cancelled``, its agent is told to
        stop, its caller hears ``Cancelled``. A task that ended already stays as it ended."""
        return await self.ops.cancel(task_id, reason=reason)

    async def find_trace(self, trace_id: str) -> TraceView:
        """``trace()`` for any trace the store has, also one memory no longer holds."""
        return await self.ops.find_trace(trace_id)

    async def find(self, ident: str) -> dict[str, Any]:
        """A task or trace by id, or by a head of one: its trace's summary and timeline."""
        return await self.ops.find(ident)

    def learned_phrases(self, capability: str | None = None) -> list[dict[str, Any]]:
        """What intent routing learned from callers' choices (of ``capability``), oldest
        first: each phrase's text, key, capability, when and who taught it."""
        phrases: list[dict[str, Any]] = self.ops.phrases.phrases(capability)
        return phrases

    async def forget_phrase(self, text: str) -> dict[str, Any]:
        """Stop routing this request by a learned phrase (memory and store alike)."""
        forgotten: dict[str, Any] = await self.ops.phrases.forget(text)
        return forgotten

    async def admin_command(self, action: str, args: dict[str, Any]) -> Any:
        return await self.ops.command(action, args)

    def admin_action(self, action: str, args: dict[str, Any], ok: bool) -> None:
        self.ops.record(action, args, ok)
