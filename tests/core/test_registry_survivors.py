"""Tests that pin behaviour of reach/core/registry.py which the mutation run showed unpinned.

Each test says what behaviour it pins and why a user would notice if it changed. The policy
is test_registry_mutants' (10 s beats; suspected past 20 s of silence, offline past 30 s).
"""

from __future__ import annotations

from test_registry_mutants import POLICY, register

from reach.config import Settings
from reach.core.agents import FULL, READY
from reach.core.liveness import Liveness
from reach.core.registry import Registry
from reach.wire.protocol import CapabilitySpec

# ---------------------------------------------------------------- registration


def test_a_registry_built_without_arguments_warms_agents_up_as_the_settings_say() -> None:
    """A new agent gets the coordinator's default warm-up (Settings.warmup, 60 s) before it
    takes a full share of work: a registry built without arguments agrees (registry:44)."""
    record = register(Registry(POLICY), "x", ["work.do"]).record
    assert record.warmup == Settings().warmup == 60.0


def test_a_registry_gives_each_agent_its_configured_warm_up_and_breaker_wait() -> None:
    """An operator's ``warmup`` and ``breaker_open_for`` reach every agent registered, not
    the record's own defaults (registry:134, registry:135)."""
    reg = Registry(POLICY, breaker_open_for=7.0, warmup=5.0)
    record = register(reg, "x", ["work.do"]).record
    assert (record.warmup, record.breaker.open_for) == (5.0, 7.0)


def test_a_re_registration_clears_a_probe_hold() -> None:
    """An agent its probes held (suspected) that connects again starts afresh: online, with
    no hold and no probe left over from its previous connection (registry:149)."""
    reg = Registry(POLICY)
    record = register(reg, "x", ["work.do"]).record
    assert reg.hold(record, True, 1.0) is Liveness.SUSPECTED
    register(reg, "x", ["work.do"], now=2.0)
    assert not record.probe_held and record.probe is None
    assert record.state is Liveness.ONLINE and record.reachable


def test_an_agent_not_heard_from_keeps_its_grace_to_the_microsecond() -> None:
    """An agent registered before any sign of life starts suspected, and goes offline only
    once the offline span has passed since then, less the microsecond that made it suspected
    at once: at 10 s − 1.5 µs it is still suspected, at 10 s offline (registry:153)."""
    reg = Registry(POLICY)
    record = reg.register(agent_id="x", name="x", version="1", max_concurrency=1,
                          specs=[CapabilitySpec(name="work.do")], link=None, now=0.0,
                          heard=False).record
    assert record.state is Liveness.SUSPECTED
    assert reg.sweep(10.0 - 1.5e-6) == []
    assert reg.sweep(10.0) == [(record, Liveness.OFFLINE)]


def test_the_last_agent_leaving_a_capability_takes_its_name_out_of_the_catalogue() -> None:
    """Once no agent declares a capability, it is no longer listed (``capability_names``,
    no_route suggestions) nor warned about as a look-alike of a new name (registry:172,
    registry:174)."""
    reg = Registry(POLICY)
    register(reg, "x", ["query.inventory"])
    register(reg, "x", ["report.sales"], now=1.0)
    assert reg.capability_names() == ["report.sales"]
    out = register(reg, "y", ["inventory.query"], now=2.0)
    assert out.warnings == []


def test_a_beat_records_what_the_agent_reports_about_its_load() -> None:
    """The load, queue depth and in-flight count a beat carries are what the admin view and
    the operators see of the agent (registry:181)."""
    reg = Registry(POLICY)
    record = register(reg, "x", ["work.do"]).record
    assert reg.heartbeat(record, 1.0, inflight=2, queue_depth=3, load=0.5) is None
    assert (record.reported_inflight, record.queue_depth, record.load) == (2, 3, 0.5)
    assert record.view(1.0)["queue_depth"] == 3 and record.view(1.0)["load"] == 0.5


# ---------------------------------------------------------------- a peer-held agent


def test_a_holder_with_no_free_slot_makes_the_agent_full_until_it_reports_room() -> None:
    """A peer's "no free slot" puts the agent on the full shelf at once (routing sends it
    nothing) without waking anyone; "room again" puts it back and wakes the slot waiters
    once; a report that changes nothing wakes nobody (registry:188-192)."""
    reg = Registry(POLICY)
    record = register(reg, "x", ["work.do"]).record
    (group,) = reg.declaring("work.do").groups.values()
    told: list[str] = []
    reg.listen(lambda r: told.append(r.agent_id))
    reg.holder_full(record, True)
    assert record.held_full and group.where[record] == FULL and told == []
    reg.holder_full(record, True)
    assert group.where[record] == FULL and told == []
    reg.holder_full(record, False)
    assert not record.held_full and group.where[record] == READY and told == ["x"]
    reg.holder_full(record, False)
    assert group.where[record] == READY and told == ["x"]


# ---------------------------------------------------------------- the sweep


def test_a_sweep_just_past_a_threshold_judges_the_agent_at_any_clock_reading() -> None:
    """"Re-judge the agents whose next threshold has passed": a sweep half a nanosecond past
    an agent's 20 s of silence suspects it, and one just past 30 s puts it offline, whether
    the clock reads near 0 or far from it (registry:225 the horizon is now plus the slack,
    registry:370 the slack is never negative)."""
    for start in (0.0, 5000.0):
        reg = Registry(POLICY)
        record = register(reg, "x", ["work.do"], now=start).record
        assert reg.sweep(start + 20.0) == []  # at the threshold: not past it yet
        assert reg.sweep(start + 20.0 + 5e-10) == [(record, Liveness.SUSPECTED)]
        assert reg.sweep(start + 30.0 + 5e-10) == [(record, Liveness.OFFLINE)]


def test_an_agent_registered_with_a_time_before_the_last_sweep_is_still_judged() -> None:
    """The clock went back between a sweep and a registration (its look falls behind the
    wheel): the next sweep still judges the agent, here offline after 51 s of silence, not
    never (registry:307-308)."""
    reg = Registry(POLICY)
    assert reg.sweep(100.0) == []
    record = register(reg, "x", ["work.do"], now=50.0).record
    assert reg.sweep(101.0) == [(record, Liveness.OFFLINE)]


# ---------------------------------------------------------------- what capabilities say


def spec(name: str, intents: list[str], description: str = "",
         tags: list[str] | None = None) -> CapabilitySpec:
    return CapabilitySpec(name=name, intents=intents, description=description,
                          tags=tags or [])


def test_intents_merge_every_agents_phrases_and_descriptions_once_each() -> None:
    """``intents()`` (what callers are shown a capability is for) lists each phrase and
    each description once, in the order first declared, and no empty description
    (registry:332-334)."""
    reg = Registry(POLICY)
    for agent_id, specs in (
            ("a", [spec("x.do", ["do x", "make x"], "does x"), spec("z.do", [], "zed")]),
            ("b", [spec("x.do", ["make x", "build x", "does x"], "does x"),
                   spec("y.do", [])]),
            ("c", [spec("x.do", [], "makes x"), spec("z.do", ["zed"])])):
        reg.register(agent_id=agent_id, name=agent_id, version="1", max_concurrency=1,
                     specs=specs, link=None, now=0.0)
    assert reg.intents() == {"x.do": ["do x", "make x", "does x", "build x", "makes x"],
                             "z.do": ["zed"], "y.do": []}


def test_the_catalogue_joins_descriptions_of_the_agents_that_have_one() -> None:
    """Intent routing reads one text per capability: the descriptions of its agents, each
    once, joined by newlines; an agent without one adds no empty line (registry:350)."""
    reg = Registry(POLICY)
    for agent_id, desc in (("a", "zed"), ("b", ""), ("c", "zed"), ("d", "zee")):
        reg.register(agent_id=agent_id, name=agent_id, version="1", max_concurrency=1,
                     specs=[spec("z.do", [f"{agent_id} z"], desc, [agent_id])], link=None,
                     now=0.0)
    (entry,) = reg.catalogue()
    assert entry.name == "z.do"
    assert entry.intents == ("a z", "b z", "c z", "d z")
    assert entry.description == "zed\nzee" and entry.tags == ("a", "b", "c", "d")
