"""A task's life, property-tested on a real ``Gateway`` (fake links, ``ManualClock``): submits,
acks, results, faults, refusals, lost connections, reconnects (as the same process or another)
and time passing, in any order Hypothesis finds. What must hold whatever the order (issue 26,
"Behaviour unchanged, and proven"):

- work that is not idempotent is never handed to a second agent while an earlier one may have
  run it (only the same process may get it again: its key cache answers);
- a task ends once, and the store holds what the caller is told;
- once every task has ended, nothing is left behind: no slot, no live task, no waiter, no
  deadline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from test_decisions import Rig

from reach.core.tasks import Task
from reach.errors import ReachError
from reach.ports import Work
from reach.testing import FakeAgentLink

NAMES = ("a", "b", "c")
KINDS = ("ok", "fault", "answer", "refuse")


def silent(work: Work) -> str:
    return "silent"


class TaskLives(RuleBasedStateMachine):

    @initialize(idempotent=st.booleans())
    def start(self, idempotent: bool) -> None:
        self.loop = asyncio.new_event_loop()
        self.idempotent = idempotent
        self.rig = Rig(ack_timeout=0.2, recovery_grace=2.0)
        self.links: dict[str, FakeAgentLink] = {}
        self.generation = {name: 0 for name in NAMES}
        self.tasks: list[Task] = []
        self.ended: dict[str, str] = {}  # task id → the state it ended in, first seen
        # task id → the (agent, process) that ran or may have run it, and why not ruled out
        self.may_have: dict[str, set[tuple[str, str]]] = {}
        self.seen: set[tuple[str, str, int]] = set()  # (agent, task id, attempt) delivered
        for name in NAMES:
            self._connect(name)

    def teardown(self) -> None:
        if not hasattr(self, "loop"):
            return
        try:
            self._run(self._finish_everything())
        finally:
            self._run(self.rig.close())
            self.loop.close()

    # ---------------------------------------------------------------- helpers

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _connect(self, name: str) -> None:
        async def go() -> None:
            record, link = self.rig.agent(name, silent, latency_ms=500,
                                          idempotent=self.idempotent, hedge=self.idempotent)
            record.instance = f"{name}-{self.generation[name]}"
            self.links[name] = link
            self.rig.gateway.agents_changed()
            await self.rig.clock.settle()
        self._run(go())
        self._check_deliveries()

    def _open(self, name: str) -> list[tuple[str, int]]:
        return sorted(self.links[name].pending)

    def _check_deliveries(self) -> None:
        """Every new delivery of work that is not idempotent goes where it may already be."""
        for name, link in self.links.items():
            process = f"{name}-{self.generation[name]}"
            for work in link.delivered:
                key = (name, work.task_id, work.attempt)
                if key in self.seen:
                    continue
                self.seen.add(key)
                earlier = self.may_have.setdefault(work.task_id, set())
                if not self.idempotent:
                    assert earlier <= {(name, process)}, (
                        f"task {work.task_id} attempt {work.attempt} sent to {process} while "
                        f"{sorted(earlier)} may have run it")
                earlier.add((name, process))

    async def _finish_everything(self) -> None:
        rig = self.rig
        for _ in range(400):  # every agent answers what it holds; a lost one comes back
            if all(t.terminal for t in self.tasks):
                break
            for link in self.links.values():
                for task_id, attempt in list(link.pending):
                    link.finish(task_id, "ok", "done", attempt=attempt)
            for name, link in self.links.items():
                record = rig.registry.by_name.get(name)
                if record is not None and not record.reachable:
                    self.generation[name] += 1
                    self._connect_now(name)
            await rig.clock.advance(0.5)
        assert all(t.terminal for t in self.tasks), [t.history for t in self.tasks
                                                     if not t.terminal]
        await rig.clock.advance(60)
        gateway = rig.gateway
        assert gateway.in_flight == 0 and gateway.live == {}
        assert sum(gateway.caller_live.values()) == 0
        assert gateway.dispatch.deadlines.pending() == 0
        for name in NAMES:
            record = rig.registry.by_name[name]
            assert record.inflight == 0, (name, record.inflight)

    def _connect_now(self, name: str) -> None:
        record, link = self.rig.agent(name, silent, latency_ms=500, idempotent=self.idempotent,
                                      hedge=self.idempotent)
        record.instance = f"{name}-{self.generation[name]}"
        self.links[name] = link
        self.rig.gateway.agents_changed()

    # ---------------------------------------------------------------- rules

    @rule(max_retries=st.integers(0, 2), timeout=st.sampled_from([None, 0.5, 3.0]))
    def submit(self, max_retries: int, timeout: float | None) -> None:
        fields: dict[str, Any] = {"max_retries": max_retries}
        if timeout is not None:
            fields["timeout"] = timeout
        try:
            self.tasks.append(self._run(self.rig.submit(**fields)))
        except ReachError:  # refused before it was accepted (no agent online): nothing owed
            return
        self._check_deliveries()

    @rule(name=st.sampled_from(NAMES), pick=st.integers(0, 5))
    def ack(self, name: str, pick: int) -> None:
        open_ = self._open(name)
        if open_:
            self.links[name].pending[open_[pick % len(open_)]].ack()
            self._run(self.rig.clock.settle())

    @rule(name=st.sampled_from(NAMES), pick=st.integers(0, 5), kind=st.sampled_from(KINDS))
    def outcome(self, name: str, pick: int, kind: str) -> None:
        open_ = self._open(name)
        if not open_:
            return
        task_id, attempt = open_[pick % len(open_)]
        link = self.links[name]
        if kind == "refuse":  # refused before it ran: proof it did not
            link.finish(task_id, "error", {"code": "unavailable", "message": "closing"},
                        attempt=attempt)
            self.may_have.get(task_id, set()).discard((name, f"{name}-{self.generation[name]}"))
        else:
            link.finish(task_id, kind, "r" if kind == "ok" else "boom", attempt=attempt)
        self._run(self.rig.clock.settle())
        self._check_deliveries()

    @rule(name=st.sampled_from(NAMES))
    def connection_lost(self, name: str) -> None:
        link = self.links[name]
        if link.closed is not None:
            return
        link.closed = "lost"
        link.lose()
        record = self.rig.registry.by_name[name]
        self.rig.registry.disconnected(record, self.rig.clock.wall())
        self._run(self.rig.clock.settle())
        self._check_deliveries()

    @rule(name=st.sampled_from(NAMES), same_process=st.booleans())
    def reconnect(self, name: str, same_process: bool) -> None:
        if self.links[name].closed is None:
            return
        if not same_process:
            self.generation[name] += 1
        self._connect(name)

    @rule(dt=st.sampled_from([0.01, 0.1, 0.3, 1.0, 3.0]))
    def time_passes(self, dt: float) -> None:
        self._run(self.rig.clock.advance(dt))
        self._check_deliveries()

    # ---------------------------------------------------------------- invariants

    @invariant()
    def a_task_ends_once_and_the_store_agrees(self) -> None:
        if not hasattr(self, "rig"):
            return
        rows = self.rig.store.rows
        for task in self.tasks:
            if not task.terminal:
                assert task.task_id not in self.ended, "an ended task came back to life"
                continue
            first = self.ended.setdefault(task.task_id, task.state.value)
            assert first == task.state.value, (first, task.state.value)
            row = rows.get(task.task_id)
            assert row is not None and row["state"] == task.state.value, (row, task.state)


TaskLives.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_a_task_s_life_in_any_order = TaskLives.TestCase
