"""A state machine over one agent's breaker and slots, as routing sees them, and the
coordinator's retry budget, each against a plain model of what its docstring promises.

Hypothesis drives calls (dispatch, success, failure), operator resets, first attempts and
retries through a clock that only moves forward, across the budget's window and the breaker's
open period; after every step the real objects must agree with the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from reach.core.agents import HELD, READY, AgentRecord, Capability, Declared, routable
from reach.core.liveness import Liveness
from reach.core.resilience import Breaker, BreakerState, RetryBudget
from reach.core.routing import Router, Saturated
from reach.core.schemas import compile_schema
from reach.errors import Unavailable
from reach.wire.protocol import CapabilitySpec

CAP = "work.do"


@dataclass
class BreakerModel:
    """Breaker as its docstring says: closed → open when at least ``min_calls`` of the last
    ``window`` outcomes and ≥ ``threshold`` of them failed; open ``open_for`` seconds; a probe
    (the one call let through, then or earlier as a last resort, once per open period) closes
    it on success or re-opens it, rested, on failure."""

    window: int
    min_calls: int
    threshold: float
    open_for: float
    state: str = "closed"
    opened_at: float = 0.0
    probe_out: bool = False
    rested: bool = False
    outcomes: list[bool] = field(default_factory=list)

    def allows(self, now: float) -> bool:
        if self.state == "closed":
            return True
        if self.state == "open":
            return now - self.opened_at >= self.open_for
        return not self.probe_out

    def early_probe(self) -> bool:
        return self.state == "open" and not self.rested

    def dispatch(self) -> None:
        if self.state == "open":
            self.state = "half_open"
        if self.state == "half_open":
            self.probe_out = True

    def record(self, ok: bool, now: float) -> None:
        if self.state == "half_open":
            self.probe_out, self.outcomes = False, []
            if ok:
                self.state, self.rested = "closed", False
            else:
                self.state, self.opened_at, self.rested = "open", now, True
            return
        self.outcomes = (self.outcomes + [ok])[-self.window:]
        failed = self.outcomes.count(False)
        if (self.state == "closed" and len(self.outcomes) >= self.min_calls
                and failed >= self.threshold * len(self.outcomes)):
            self.state, self.opened_at = "open", now

    def reset(self) -> None:
        self.state, self.outcomes, self.probe_out, self.rested = "closed", [], False, False

    def fault_rate(self) -> float:
        return self.outcomes.count(False) / len(self.outcomes) if self.outcomes else 0.0


@dataclass
class BudgetModel:
    """At most ``minimum`` + ``ratio`` × first attempts − retries, both counted over the last
    ``window`` whole seconds (an event at second s counts while s > second(now) − window)."""

    ratio: float
    minimum: int
    window: float
    events: list[tuple[int, str]] = field(default_factory=list)

    def _count(self, kind: str, now: float) -> int:
        horizon = int(now) - self.window
        return sum(1 for s, k in self.events if k == kind and s > horizon)

    def allowance(self, now: float) -> float:
        return self.minimum + self.ratio * self._count("first", now) - self._count("retry", now)

    def spend(self, now: float) -> bool:
        if self.allowance(now) < 1:
            return False
        self.events.append((int(now), "retry"))
        return True


class BreakerSlotsBudget(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.record: AgentRecord | None = None
        self.budget = RetryBudget()
        self.budget_model = BudgetModel(self.budget.ratio, self.budget.minimum,
                                        self.budget.window)
        self.model: BreakerModel | None = None
        self.calls = 0  # in flight, as the model counts them

    @rule(window=st.integers(1, 6), min_calls=st.integers(1, 6),
          threshold=st.sampled_from([0.2, 0.5, 1.0]), open_for=st.sampled_from([0.5, 2.0, 5.0]),
          slots=st.integers(1, 3))
    @precondition(lambda self: self.record is None)
    def connect(self, window: int, min_calls: int, threshold: float, open_for: float,
                slots: int) -> None:
        spec = CapabilitySpec(name=CAP, params={"type": "object"}, weight=1.0)
        self.record = AgentRecord(agent_id="a", name="a", version="1", max_concurrency=slots,
                                  capabilities={CAP: Capability(CAP, spec,
                                                                compile_schema(spec.params))})
        self.record.breaker = Breaker(window=window, min_calls=min_calls, threshold=threshold,
                                      open_for=open_for)
        self.record.state = Liveness.ONLINE
        self.declared = Declared(CAP)
        self.record.groups.append(self.declared.join(self.record))
        self.model = BreakerModel(window, min_calls, threshold, open_for)

    # ---------------------------------------------------------------- time

    @rule(dt=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0, 2.5, 4.99, 5.0, 9.5, 10.0, 30.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    # ---------------------------------------------------------------- the agent

    @rule()
    @precondition(lambda self: self.record is not None)
    def dispatch(self) -> None:
        """Route one call as the gateway does: pick, then the breaker hears of the dispatch
        and a slot is taken."""
        record, model = self.record, self.model
        assert record is not None and model is not None
        free = self.calls < record.max_concurrency
        try:
            chosen = Router().pick(CAP, {}, "x", self.declared, self.now)
        except Saturated:
            assert model.allows(self.now) and not free
            return
        except Unavailable:
            assert not (free and (model.allows(self.now) or model.early_probe()))
            return
        assert chosen is record
        assert free and (model.allows(self.now) or model.early_probe())
        record.breaker.on_dispatch(self.now)
        model.dispatch()
        record.inflight += 1
        self.calls += 1

    @rule(ok=st.booleans())
    @precondition(lambda self: self.calls > 0)
    def complete(self, ok: bool) -> None:
        record, model = self.record, self.model
        assert record is not None and model is not None
        state = record.breaker.record(ok, self.now)
        model.record(ok, self.now)
        assert state.value == model.state
        record.inflight -= 1
        self.calls -= 1

    @rule()
    @precondition(lambda self: self.record is not None)
    def operator_reset(self) -> None:
        assert self.record is not None and self.model is not None
        self.record.breaker.reset()
        self.model.reset()

    @invariant()
    def breaker_agrees(self) -> None:
        if self.record is None or self.model is None:
            return
        b, m = self.record.breaker, self.model
        assert b.state is BreakerState(m.state)
        assert b.allows(self.now) == m.allows(self.now)
        assert b.early_probe(self.now) == m.early_probe()
        assert list(b.outcomes) == m.outcomes
        assert b.fault_rate() == pytest.approx(m.fault_rate())
        assert b.rested == m.rested
        if b.state is BreakerState.OPEN:
            assert b.opened_at == m.opened_at

    @invariant()
    def slots_agree(self) -> None:
        if self.record is None:
            return
        assert self.record.inflight == self.calls
        # Slot changes re-shelve at once; breaker changes are found by routing (not here).
        where = self.declared.groups[next(iter(self.declared.groups))].where[self.record]
        if self.record.breaker.state is BreakerState.CLOSED and where != HELD:
            assert where == routable(self.record)
            assert (where == READY) == (self.calls < self.record.max_concurrency)

    # ---------------------------------------------------------------- the budget

    @rule(n=st.integers(1, 30))
    def first_attempts(self, n: int) -> None:
        for _ in range(n):
            self.budget.first(self.now)
            self.budget_model.events.append((int(self.now), "first"))

    @rule(n=st.integers(1, 12))
    def retries(self, n: int) -> None:
        for _ in range(n):
            assert self.budget.spend(self.now) == self.budget_model.spend(self.now)

    @invariant()
    def budget_agrees(self) -> None:
        assert self.budget.allowance(self.now) == pytest.approx(
            self.budget_model.allowance(self.now))


BreakerSlotsBudget.TestCase.settings = settings(max_examples=80, stateful_step_count=40,
                                                deadline=None)
test_breaker_slots_and_budget = BreakerSlotsBudget.TestCase
