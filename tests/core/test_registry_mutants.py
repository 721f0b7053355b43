"""reach.core.registry, pinned where mutation testing found it loose (issue 17).

The warning budget of one registration (docs/security.md: "warnings capped at 20") and the
exact count past it: each term of the look-alike count (other agents' names of that shape, this
agent's previous-only names, the name itself when somebody else declares it, this
registration's earlier names) is checked with the list already full, where only the count shows.
Also: a new version starts with a clean breaker and the same version keeps its breaker, every
registration tells the listeners, and the defaults agree with ``Settings``.
"""

from __future__ import annotations

from collections.abc import Awaitable

from reach.config import Settings
from reach.core.agents import AgentRecord
from reach.core.liveness import Liveness, LivenessPolicy
from reach.core.registry import Registration, Registry
from reach.core.resilience import BreakerState
from reach.ports import AgentLink
from reach.wire.protocol import CapabilitySpec

POLICY = LivenessPolicy(interval=10.0, suspect_after=2.0, offline_after=3.0)
# Twenty renamed names: their twenty warnings fill the list, so what follows is only counted.
FILL = [f"Area{i}.Work" for i in range(20)]


def register(reg: Registry, agent_id: str, caps: list[str], *, version: str = "1",
             now: float = 0.0) -> Registration:
    return reg.register(agent_id=agent_id, name=agent_id, version=version, max_concurrency=1,
                        specs=[CapabilitySpec(name=c) for c in caps], link=None, now=now)


def unsaid(out: Registration) -> int:
    """How many warnings the registration counted without listing (0 if none)."""
    last = out.warnings[-1] if out.warnings else ""
    if not last.startswith("... and "):
        return 0
    assert len(out.warnings) == 21  # twenty listed, then the count
    return int(last.removeprefix("... and ").removesuffix(" more warnings"))


def test_a_registration_lists_twenty_warnings_and_counts_the_rest_exactly() -> None:
    """The cap is the documented 20 (docs/security.md), and the count past it is exact: an
    operator reading "... and 5 more" must be able to trust the 5."""
    reg = Registry(POLICY)
    out = register(reg, "x", [f"Area{i}.Work" for i in range(25)])
    assert len(out.warnings) == 21
    assert out.warnings[19] == "capability 'Area19.Work' registered as 'area19.work'"
    assert out.warnings[20] == "... and 5 more warnings"


def test_with_the_list_full_no_more_warning_is_listed() -> None:
    """Past twenty listed warnings a look-alike is counted, not listed (the list stays at
    twenty whatever comes after)."""
    reg = Registry(POLICY)
    register(reg, "o", ["inventory.query"])
    out = register(reg, "x", [*FILL, "query.inventory"])
    assert [w for w in out.warnings if "looks like" in w] == []
    assert unsaid(out) == 1


def test_the_count_takes_other_agents_look_alikes() -> None:
    """Other agents' names of the same shape are counted once each, however many agents
    declare each one; names with other words are not."""
    reg = Registry(POLICY)
    register(reg, "o", ["w1.w2.w3"])
    register(reg, "p", ["w2.w3.w1", "W1.W2.W3"])  # the second is o's name again
    register(reg, "q", ["w1.w2.w3.w4", "w1.w2"])  # other words: not look-alikes
    out = register(reg, "x", [*FILL, "w3.w2.w1"])
    assert unsaid(out) == 2


def test_the_count_leaves_out_this_agents_previous_names() -> None:
    """An agent renaming its own capability is not warned that it looks like itself: its
    previous names that nobody else declares are not counted."""
    reg = Registry(POLICY)
    register(reg, "x", ["inventory.query", "sales.report"])
    out = register(reg, "x", [*FILL, "query.inventory", "report.sales"])
    assert unsaid(out) == 0
    assert len(out.warnings) == 20


def test_the_count_keeps_a_previous_name_that_another_agent_declares_too() -> None:
    """A previous name also declared by somebody else is theirs too: it is still counted."""
    reg = Registry(POLICY)
    register(reg, "o", ["inventory.query"])
    register(reg, "x", ["inventory.query"])
    out = register(reg, "x", [*FILL, "query.inventory"])
    assert unsaid(out) == 1


def test_the_count_leaves_out_the_name_itself_when_somebody_else_declares_it() -> None:
    """Declaring a name another agent declares is joining it, not a look-alike."""
    reg = Registry(POLICY)
    register(reg, "o", ["inventory.query"])
    out = register(reg, "x", [*FILL, "inventory.query"])
    assert unsaid(out) == 0
    assert len(out.warnings) == 20


def test_the_count_takes_this_registrations_earlier_look_alikes() -> None:
    """Two spellings of one thing in one registration: the second is counted once, the third
    twice (each earlier new name it looks like)."""
    reg = Registry(POLICY)
    out = register(reg, "x", [*FILL, "inventory.query", "query.inventory"])
    assert unsaid(out) == 1
    reg2 = Registry(POLICY)
    out = register(reg2, "x", [*FILL, "w1.w2.w3", "w2.w1.w3", "w3.w2.w1"])
    assert unsaid(out) == 3


def test_a_name_somebody_else_declares_is_not_counted_as_this_registrations_own() -> None:
    """A name joined (declared by another agent already) is counted through the index, not
    again as one of this registration's new names."""
    reg = Registry(POLICY)
    register(reg, "o", ["inventory.query"])
    out = register(reg, "x", [*FILL, "inventory.query", "query.inventory"])
    assert unsaid(out) == 1  # query.inventory looks like o's inventory.query, once


def test_look_alikes_are_listed_while_there_is_room_and_counted_past_it() -> None:
    """With nineteen warnings listed, one look-alike of three is listed and two counted."""
    reg = Registry(POLICY)
    register(reg, "o", ["w1.w2.w3", "w2.w1.w3", "w3.w1.w2"])
    out = register(reg, "x", [*FILL[:19], "w3.w2.w1"])
    assert out.warnings[19] == ("capability 'w3.w2.w1' looks like existing 'w1.w2.w3'; "
                                "callers asking for one will not reach the other")
    assert unsaid(out) == 2


def opened(record: AgentRecord) -> None:
    for _ in range(record.breaker.min_calls):
        record.breaker.record(False, 1.0)
    assert record.breaker.state is BreakerState.OPEN


def test_a_new_version_starts_with_a_clean_breaker_the_same_version_keeps_its_own() -> None:
    """A fixed deploy (another version) must not wait out the faults of the code it replaced;
    a reconnect of the same version must not forget them."""
    reg = Registry(POLICY)
    record = register(reg, "x", ["work.do"]).record
    opened(record)
    assert register(reg, "x", ["work.do"], now=2.0).record.breaker.state is BreakerState.OPEN
    again = register(reg, "x", ["work.do"], version="2", now=3.0).record
    assert again is record
    assert record.breaker.state is BreakerState.CLOSED and not record.breaker.outcomes
    assert record.version == "2"


def test_every_registration_tells_the_listeners_even_without_a_liveness_change() -> None:
    """The gateway wakes tasks waiting for a capability when an agent registers: a
    re-registration that adds a capability (its agent online all along) must tell it too."""
    reg = Registry(POLICY)
    heard: list[tuple[str, list[str]]] = []
    reg.listen(lambda r: heard.append((r.agent_id, sorted(r.capabilities))))
    register(reg, "x", ["work.do"])
    register(reg, "x", ["work.do", "work.more"], now=1.0)
    assert heard == [("x", ["work.do"]), ("x", ["work.do", "work.more"])]


def test_the_registry_defaults_agree_with_the_settings() -> None:
    """A registry built without arguments opens breakers for as long as the coordinator's
    defaults say (Settings.breaker_open_for)."""
    record = register(Registry(POLICY), "x", ["work.do"]).record
    assert record.breaker.open_for == Settings().breaker_open_for == 5.0


def test_a_dropped_capability_never_gets_the_agent_back_on_its_shelves() -> None:
    """Re-registered without a capability, the agent leaves that capability's routing groups
    for good: a later slot or liveness change must not shelve it there again (routing would
    send it work it no longer declares)."""
    reg = Registry(POLICY)
    register(reg, "o", ["a.work"])  # keeps a.work's group alive
    record = register(reg, "x", ["a.work"]).record
    register(reg, "x", ["b.work"], now=1.0)
    assert [g.capability for g in record.groups] == ["b.work"]
    record.inflight = 1
    record.inflight = 0
    reg.heartbeat(record, 2.0, inflight=0, queue_depth=0, load=0.0)
    reg.disconnected(record, 3.0)
    (group,) = reg.declaring("a.work").groups.values()
    assert record not in group.where and list(reg.declaring("a.work")) == ["o"]


class _Link:
    """An AgentLink that carries nothing (only its identity matters here)."""

    def deliver(self, work: object, reply: object) -> bool:
        return False

    def cancel(self, task_id: str, attempt: int, *, tell: bool = True) -> None:
        return None

    def close(self, reason: str) -> Awaitable[None]:
        raise AssertionError("the registry never closes a link")


def test_a_disconnected_agent_keeps_no_link_and_a_new_connection_brings_one() -> None:
    """After a disconnect nothing may be sent down the old link: the record drops it, and
    only the next registration (a new connection) gives it one again."""
    reg = Registry(POLICY)
    link: AgentLink = _Link()
    record = reg.register(agent_id="x", name="x", version="1", max_concurrency=1,
                          specs=[CapabilitySpec(name="a.work")], link=link, now=0.0).record
    assert record.link is link and record.connected
    reg.disconnected(record, 1.0)
    assert record.link is None and not record.connected and not record.reachable
    again: AgentLink = _Link()
    reg.register(agent_id="x", name="x", version="1", max_concurrency=1,
                 specs=[CapabilitySpec(name="a.work")], link=again, now=2.0)
    assert record.link is again and record.reachable


def test_an_agent_that_stops_draining_is_online_again_and_says_so() -> None:
    """An operator's undrain puts the agent back in service at once, and the change is
    returned (and told to the listeners) like every liveness change."""
    reg = Registry(POLICY)
    record = register(reg, "x", ["a.work"]).record
    heard: list[Liveness] = []
    reg.listen(lambda r: heard.append(r.state))
    assert reg.deregister(record, 1.0) is Liveness.SUSPECTED and record.draining
    assert reg.undrain(record, 2.0) is Liveness.ONLINE
    assert not record.draining and record.reachable
    assert heard == [Liveness.SUSPECTED, Liveness.ONLINE]
    assert reg.undrain(record, 3.0) is None  # nothing changed


def test_the_look_alike_named_is_another_agents_not_this_agents_previous_name() -> None:
    """An agent renaming its capability while another agent has a look-alike is warned about
    the other agent's name, not about the name it is leaving behind."""
    reg = Registry(POLICY)
    register(reg, "x", ["w1.w2.w3"])
    register(reg, "o", ["w3.w2.w1"])
    out = register(reg, "x", ["w2.w1.w3"], now=1.0)
    assert out.warnings == ["capability 'w2.w1.w3' looks like existing 'w3.w2.w1'; callers "
                            "asking for one will not reach the other"]


def test_a_stale_look_on_the_wheel_does_not_hide_the_looks_after_it() -> None:
    """Two agents due in the same slot of the wheel, the first entry stale (its agent was
    re-registered since): the second agent is still judged when its time comes. Dropping it
    would leave a silent agent online for ever."""
    reg = Registry(POLICY)
    a = register(reg, "a", ["x.work"]).record  # looked at 20 s: that look goes stale below
    b = register(reg, "b", ["x.work"]).record  # looked at 20 s, after a's entry
    reg.register(agent_id="a", name="a", version="1", max_concurrency=1,
                 specs=[CapabilitySpec(name="x.work")], link=None, now=5.0, heard=False)
    assert reg.sweep(16.0) == [(a, Liveness.OFFLINE)]
    assert reg.sweep(21.0) == [(b, Liveness.SUSPECTED)]
    assert reg.sweep(31.0) == [(b, Liveness.OFFLINE)]


def test_a_look_not_due_yet_does_not_hide_a_due_one_after_it_in_its_slot() -> None:
    """Entries of one slot are in filing order, not time order: one not due yet is put back
    and the sweep goes on to the next, which is due (else that agent would never be judged)."""
    reg = Registry(POLICY)
    a = register(reg, "a", ["x.work"], now=0.5).record  # looked at 20.5 s
    b = reg.register(agent_id="b", name="b", version="1", max_concurrency=1,
                     specs=[CapabilitySpec(name="x.work")], link=None, now=10.1,
                     heard=False).record  # offline look at 20.1 s, filed after a's
    assert b.due is not None and a.due is not None and b.due < 20.2 < a.due
    assert reg.sweep(20.2) == [(b, Liveness.OFFLINE)]
    assert reg.sweep(20.6) == [(a, Liveness.SUSPECTED)]


def test_an_agent_that_beat_since_its_look_is_looked_at_again_later() -> None:
    """The common case of a sweep: the agent beat since its look was filed, so it is filed
    again for its new deadline (not dropped: it would never be suspected once it goes
    silent), and the sweep goes on with the slot's other entries."""
    reg = Registry(POLICY)
    a = register(reg, "a", ["x.work"]).record  # looked at 20 s
    b = register(reg, "b", ["x.work"]).record  # looked at 20 s, after a
    assert reg.heartbeat(a, 10.0, inflight=0, queue_depth=0, load=0.0) is None
    assert reg.sweep(21.0) == [(b, Liveness.SUSPECTED)]
    assert a.state is Liveness.ONLINE
    assert reg.sweep(31.0) == [(a, Liveness.SUSPECTED), (b, Liveness.OFFLINE)]


def test_a_registration_records_what_carries_the_work_and_which_process_it_is() -> None:
    """``kind`` picks how work is sent and ``instance`` tells a restart from a second copy:
    both follow the latest registration."""
    reg = Registry(POLICY)
    record = reg.register(agent_id="x", name="x", version="1", max_concurrency=1,
                          specs=[CapabilitySpec(name="a.work")], link=None, now=0.0,
                          instance="i-1", kind="http").record
    assert (record.kind, record.instance) == ("http", "i-1")
    reg.register(agent_id="x", name="x", version="1", max_concurrency=1,
                 specs=[CapabilitySpec(name="a.work")], link=None, now=1.0, instance="i-2")
    assert (record.kind, record.instance) == ("websocket", "i-2")
