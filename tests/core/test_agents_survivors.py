"""Tests that pin behaviour of reach/core/agents.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed.
"""

from __future__ import annotations

import random

import pytest
from test_bulkhead import FAST, SLOW, registered, spec, where
from test_bulkhead import agent as tiered
from test_routing_mutants import CAP, GOOD, NOW, agent, by_id, opened

from reach.core.agents import FULL, HELD, OUT, READY, AgentRecord, Declared, Group, routable
from reach.core.liveness import Liveness
from reach.core.routing import Router, Saturated

# ------------------------------------------------------------------ where an agent stands


def joined(record: AgentRecord) -> Declared:
    """Index ``record`` for ``CAP`` as the registry does (its group knows it and it knows
    the group, so slot and liveness changes re-shelve it)."""
    declared = Declared(CAP)
    record.groups.append(declared.join(record))
    return declared


def group_of(declared: Declared) -> Group:
    return next(iter(declared.groups.values()))


def test_an_agent_whose_holder_is_full_takes_no_work_though_it_has_slots_here() -> None:
    """A peer-held agent whose holder refused for want of a slot (``held_full``) is full
    for routing even when this node has calls free for it: sending work there would only be
    refused again. Once the holder reports room, it is ready again."""
    r = agent("a", max_concurrency=4)
    r.held_full = True
    assert not r.room(CAP)
    assert routable(r) == FULL and routable(r, CAP) == FULL
    with pytest.raises(Saturated):
        Router().pick(CAP, GOOD, "x", by_id(r), NOW)
    r.held_full = False
    assert r.room(CAP) and routable(r, CAP) == READY
    assert Router().pick(CAP, GOOD, "x", by_id(r), NOW) is r


def test_an_agent_at_exactly_its_capacity_has_no_room_and_one_below_has() -> None:
    """``max_concurrency`` is the number of calls an agent runs at once: the one that would
    make it one more is refused (``room``), and the agent stands FULL."""
    r = agent("a", max_concurrency=2, inflight=2)
    assert not r.room(CAP) and routable(r, CAP) == FULL
    r.inflight = 1
    assert r.room(CAP) and routable(r, CAP) == READY


@pytest.mark.parametrize(("state", "connected", "reachable", "status"), [
    (Liveness.ONLINE, True, True, READY),
    (Liveness.ONLINE, False, False, OUT),
    (Liveness.SUSPECTED, True, False, OUT),
    (Liveness.OFFLINE, True, False, OUT),
    (Liveness.OFFLINE, False, False, OUT),
])
def test_only_an_online_connected_agent_is_reachable(state: Liveness, connected: bool,
                                                     reachable: bool, status: int) -> None:
    """New work goes only to agents that are online and connected: a suspected, offline or
    disconnected one is neither ``reachable`` (what the gateway and alerting ask) nor on a
    routing shelf (OUT), whatever its breaker and slots say."""
    r = agent("a")
    r.state, r.connected = state, connected
    assert r.reachable is reachable
    assert routable(r) == status and routable(r, CAP) == status
    r.breaker = opened(NOW)  # a breaker does not bring an unreachable agent back
    assert routable(r, CAP) == (HELD if reachable else OUT)


def test_a_held_breaker_ranks_before_a_full_agent() -> None:
    """An agent at capacity whose breaker is open stands HELD, not FULL: a full agent
    decides "saturated" (callers wait for a slot), a held one must not."""
    r = agent("a", max_concurrency=1, inflight=1, breaker=opened(NOW))
    assert routable(r, CAP) == HELD and routable(r) == HELD


@pytest.mark.parametrize(("state", "probe_held", "connected", "draining", "why"), [
    (Liveness.ONLINE, True, False, True, None),
    (Liveness.OFFLINE, True, False, True, None),
    (Liveness.SUSPECTED, True, False, True, "probe"),
    (Liveness.SUSPECTED, False, False, True, "disconnected"),
    (Liveness.SUSPECTED, False, True, True, "draining"),
    (Liveness.SUSPECTED, False, True, False, "heartbeat"),
])
def test_a_suspected_agent_says_why_in_order_of_precedence(
        state: Liveness, probe_held: bool, connected: bool, draining: bool,
        why: str | None) -> None:
    """The admin feed's ``suspected_by``: only a suspected agent has a reason; slow probes
    outrank a closed socket, which outranks draining, and missed beats are what is left."""
    r = agent("a")
    r.state, r.probe_held, r.connected, r.draining = state, probe_held, connected, draining
    assert r.suspected_by(NOW) == why
    assert r.view(NOW)["suspected_by"] == why


# ------------------------------------------------------------------ warm-ups: when one starts

SPAN = 60.0  # the default warm-up (AgentRecord.warmup), which these agents do not override


def test_coming_back_at_capacity_starts_a_warm_up_and_a_freed_slot_does_not_restart_it(
        ) -> None:
    """An agent back online with all its slots still busy (FULL) has come back all the same:
    its warm-up starts with the beat that brought it back, and its group knows it may be
    warming until then + the warm-up. A slot freed later (FULL → READY) is not a recovery:
    its share keeps growing from that beat instead of dropping to the floor again."""
    r = agent("a", max_concurrency=2)
    r.last_beat = NOW
    group = group_of(joined(r))
    assert r.warm_from == NOW and group.warm_until == NOW + SPAN
    r.state = Liveness.OFFLINE
    r.reshelve()
    assert r not in group.where
    r.take(CAP)
    r.take(CAP)
    r.last_beat = NOW + 50
    r.state = Liveness.ONLINE
    r.reshelve()
    assert group.where[r] == FULL
    assert r.warm_from == NOW + 50 and group.warm_until == NOW + 50 + SPAN
    r.last_beat = NOW + 55
    r.give(CAP)  # a slot free: ready, the same warm-up
    assert group.where[r] == READY and r.warm_from == NOW + 50
    assert r.warm_share(CAP, NOW + 80) == pytest.approx(0.55)


def test_beats_and_slot_changes_of_an_online_agent_do_not_restart_its_warm_up() -> None:
    """A warm-up starts when an agent comes back, not whenever it beats or takes a call: an
    agent busy since it joined keeps warming from its registration."""
    r = agent("a", max_concurrency=3)
    r.last_beat = NOW
    joined(r)
    r.last_beat = NOW + 30  # a heartbeat (no liveness change: nothing re-shelved)
    r.take(CAP)
    r.give(CAP)
    r.reshelve(NOW + 31)
    assert r.warm_from == NOW
    assert r.warm_share(CAP, NOW + 60) == 1.0


def test_an_agent_that_joins_at_capacity_is_warming_from_its_registration() -> None:
    """An agent indexed while every slot is busy (a re-registration with calls running) is
    still new to routing: it warms up from the registration, as a free one would."""
    r = agent("a", max_concurrency=1)
    r.last_beat = NOW
    r.take(CAP)  # (not indexed yet: nothing to re-shelve)
    group = group_of(joined(r))
    assert group.where[r] == FULL
    assert r.warm_from == NOW and group.warm_until == NOW + SPAN


def test_joining_a_new_index_after_a_full_spell_is_not_a_recovery() -> None:
    """The registry re-indexes a re-registering agent (it leaves its groups and joins new
    ones): one that was merely full and is free again has not come back from anywhere, so
    its warm-up is not restarted at the re-registration."""
    r = agent("a", max_concurrency=1)
    r.last_beat = NOW
    r.take(CAP)
    joined(r)  # FULL, warming from NOW
    r.groups.clear()  # (Registry._unindex)
    r.give(CAP)
    r.last_beat = NOW + 30
    group = group_of(joined(r))
    assert group.where[r] == READY and r.warm_from == NOW


def test_a_group_never_forgets_a_member_still_warming() -> None:
    """``warm_until`` bounds the warm-ups of every member: a later member whose own warm-up
    ends sooner (it warms from an older beat) must not lower it, or routing would stop
    thinning the first one's share while it is still cold."""
    first, late = agent("first"), agent("late")
    first.last_beat, late.last_beat = NOW, NOW - 30
    declared = Declared(CAP)
    declared.join(first)
    group = declared.join(late)
    assert late.warm_from == NOW - 30
    assert group.warm_until == NOW + SPAN


def test_a_held_agent_does_not_mark_its_new_group_as_warming() -> None:
    """Only agents routing may send work to (READY or FULL) bound a group's warm-ups. An
    agent re-indexed (a re-registration) while its breaker is open lands on ``held`` of a
    fresh group: that group has nobody warming, so a pick over it stays on the cheap path
    (a random pick past ``exact`` draws one agent, not two for thinning)."""
    r = agent("held")
    r.last_beat = NOW
    joined(r)  # warming from NOW
    r.breaker = opened(NOW + 1)
    r.groups.clear()  # (Registry._unindex)
    fleet = {f"r{i}": agent(f"r{i}") for i in range(40)}  # warm: they joined at 0
    declared = Declared.of(CAP, fleet)
    group = declared.join(r)
    assert group.where[r] == HELD and r.warm_from == NOW
    assert group.warm_until < NOW
    router = Router(strategy="random", rng=random.Random(3))
    router.pick(CAP, GOOD, "x", declared, NOW + 2)
    assert router.examined == 2  # the held agent, and the one ready agent drawn


# ------------------------------------------------------------------ shelves keep their order


def test_placing_without_a_status_reads_the_agent_itself() -> None:
    """``Group.place(record)`` with no status puts the agent where its own state says: an
    open breaker nobody announced sends it to ``held``, a reset one back to ``ready``."""
    r = agent("a")
    group = group_of(joined(r))
    r.breaker = opened(NOW)
    assert group.place(r) == HELD and group.where[r] == HELD and r in group.held
    r.breaker.reset()
    assert group.place(r) == READY and r in group.ready and r not in group.held


def test_round_robin_past_exact_takes_turns_while_calls_take_and_free_slots() -> None:
    """A slot taken or freed that leaves an agent on the same shelf leaves it where it is
    on that shelf: round robin past ``exact`` walks the shelf by position, so an agent moved
    to the end at every call would get some turns twice and others none."""
    records = [agent(f"a{i}", max_concurrency=4) for i in range(3)]
    declared = Declared(CAP)
    for r in records:
        r.groups.append(declared.join(r))
    router = Router(strategy="round_robin", exact=0)
    turns = []
    for _ in range(6):
        chosen = router.pick(CAP, GOOD, "x", declared, NOW)
        chosen.take(CAP)  # the dispatch takes a slot, and frees it when the call ends
        chosen.give(CAP)
        turns.append(chosen.agent_id)
    assert sorted(turns) == ["a0", "a0", "a1", "a1", "a2", "a2"]
    assert turns[:3] == turns[3:]


# ------------------------------------------------------------------ the admin view


def test_the_seven_day_success_rate_is_shown_to_four_places_and_a_tie_is_one_half() -> None:
    """The admin feed's ``success_7d``: successes over judged calls, rounded to 4 places
    (1 of 3 is 0.3333); as many faults as successes is 0.5, not "no calls yet"."""
    r = agent("a")
    for ok in (True, False, False):
        r.outcome(CAP, ok, NOW)
    view = r.view(NOW)
    assert view["success_7d"] == 0.3333 and view["calls_7d"] == 3
    r.outcome(CAP, True, NOW)
    assert r.view(NOW)["success_7d"] == 0.5


def test_an_agent_declaring_nothing_is_not_warming() -> None:
    """An agent with no capabilities has nothing to warm up: it is shown fully warm."""
    r = agent("a")
    r.capabilities = {}
    view = r.view(NOW)
    assert view["warming"] is False and view["warm_share"] == 1.0


def test_the_warm_share_is_shown_to_three_places() -> None:
    """The admin feed shows how far into its warm-up an agent is to a thousandth."""
    r = agent("a")
    r.warmup, r.warm_from = 7.0, NOW
    assert r.view(NOW + 1)["warm_share"] == 0.229  # 0.1 + 0.9 / 7 = 0.22857...


# ------------------------------------------------------------------ the index of a capability


def test_the_index_is_a_mapping_of_its_agents_and_keeps_a_group_while_it_has_members(
        ) -> None:
    """``Declared`` reads as agent id → record (the gateway and admission iterate it), and
    agents declaring alike share one group that lives as long as it has members: one leaving
    (even twice, as a repeated deregistration would) never takes the others' group away."""
    a, b = agent("a"), agent("b")
    declared = Declared(CAP)
    group = declared.join(a)
    assert declared.join(b) is group and group.members == 2
    assert len(declared) == 2 and list(declared) == ["a", "b"] and declared["b"] is b
    assert dict(declared) == {"a": a, "b": b}
    declared.leave(a)
    declared.leave(a)  # no longer there: nothing happens
    assert list(declared.groups.values()) == [group] and group.members == 1
    assert group.where == {b: READY} and list(declared) == ["b"]
    assert Router().pick(CAP, GOOD, "x", declared, NOW) is b
    declared.leave(b)
    assert declared.groups == {} and len(declared) == 0


def test_a_one_off_index_over_a_plain_mapping_holds_every_agent() -> None:
    """``Declared.of`` (routing over a plain mapping) indexes every record of it, shelved."""
    a, b = agent("a"), agent("b", inflight=4)
    declared = Declared.of(CAP, by_id(a, b))
    assert declared.capability == CAP and dict(declared) == {"a": a, "b": b}
    assert group_of(declared).where == {a: READY, b: FULL}


# ------------------------------------------------------------------ bulkheads


def test_an_agent_indexed_while_slow_calls_fill_their_tier_is_full_for_them_only() -> None:
    """Re-indexed with three 40 s calls running (of 4 slots, 3 per tier), the agent goes on
    the slow capability's ``full`` shelf at once, while still ``ready`` for fast calls:
    routing must not send a fourth slow call there."""
    record = tiered(4, spec(SLOW, 40_000), spec(FAST, 200))
    for _ in range(3):
        record.take(SLOW)  # (not indexed yet: nothing re-shelved, no bulkhead planned)
    index = registered(record)
    assert record.by_tier == [0, 0, 3]
    assert where(index, record, SLOW) == FULL and where(index, record, FAST) == READY
    with pytest.raises(Saturated):
        Router().pick(SLOW, {}, "c", index[SLOW], NOW)
    assert Router().pick(FAST, {}, "c", index[FAST], NOW) is record


def test_a_call_of_a_capability_no_longer_declared_takes_an_agent_slot_but_no_tier() -> None:
    """A call dispatched just as a re-registration dropped its capability still runs at the
    agent: it takes (and later frees) one of the agent's slots, and counts in no tier."""
    record = tiered(2, spec(SLOW, 40_000), spec(FAST, 200))
    registered(record)
    record.take("gone.cap")
    assert record.inflight == 1 and record.by_tier == [0, 0, 0]
    record.take(FAST)
    assert not record.room(SLOW) and not record.room(FAST)  # the agent's 2 slots are busy
    record.give("gone.cap")
    assert record.inflight == 1 and record.by_tier == [1, 0, 0] and record.room(SLOW)


def test_a_give_too_many_never_lets_a_tier_run_past_its_share() -> None:
    """A slot freed twice (a bug elsewhere) must not leave a tier's count below zero: the
    fast tier of this agent still holds at most its 3 of 4 slots afterwards."""
    record = tiered(4, spec(SLOW, 40_000), spec(FAST, 200))
    registered(record)
    record.take(FAST)
    record.give(FAST)
    record.give(FAST)
    assert record.by_tier == [0, 0, 0]
    for _ in range(3):
        assert record.room(FAST)
        record.take(FAST)
    assert not record.room(FAST) and record.room(SLOW)


# ------------------------------------------------------------------ the 7-day record


def test_a_dropped_capability_counts_in_the_7_day_totals_until_its_room_is_needed() -> None:
    """The 7-day record holds one rate per declared capability (bounded memory). A
    capability dropped at a re-registration of the same version keeps counting in the
    admin view's totals until a newly declared one needs its room."""
    record = tiered(4, spec("old.cap", 100), spec(FAST, 200))
    record.outcome("old.cap", False, NOW)
    record.capabilities = tiered(4, spec(FAST, 200), spec(SLOW, 40_000)).capabilities
    record.outcome(FAST, True, NOW)
    assert set(record.days) == {"old.cap", FAST}
    assert record.view(NOW)["calls_7d"] == 2 and record.view(NOW)["success_7d"] == 0.5
    record.outcome(SLOW, True, NOW)
    assert set(record.days) == {FAST, SLOW} and record.view(NOW)["success_7d"] == 1.0
