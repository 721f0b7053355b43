"""Why no agent can take a capability (reach/core/reasons.py; issue 14: "a drained agent is
reported 'none is online'", "unavailable says check reach.agents() to a remote client")."""

from __future__ import annotations

from test_routing import CAP, NOW, agent, open_breaker, probing_breaker

from reach.core.liveness import Liveness
from reach.core.reasons import holdup, none_can


def test_each_holdup_in_words() -> None:
    drained = agent("a", state=Liveness.SUSPECTED)
    drained.draining = True
    gone = agent("b", connected=False)
    off = agent("c", state=Liveness.OFFLINE)
    quiet = agent("d", state=Liveness.SUSPECTED)
    quiet.last_beat = NOW - 3.25
    tripped = agent("e", breaker=open_breaker())
    probing = agent("h", breaker=probing_breaker())
    full = agent("f", inflight=4, max_concurrency=4)
    fine = agent("g")
    assert [holdup(r, NOW) for r in (drained, gone, off, quiet, tripped, probing, full,
                                     fine)] == [
        "drained by an operator", "disconnected", "offline",
        "suspected (no heartbeat for 3.2 s)", "breaker open",
        "breaker half-open (its probe call is out)", "busy (4/4 slots)", ""]
    probing.breaker.probing = False  # half-open, its probe not sent yet: takes the next call
    assert holdup(probing, NOW) == ""
    zombie = agent("z", state=Liveness.SUSPECTED)
    zombie.probe_held = True  # beats fine, but two slow probes in a row (core/probes.py)
    assert holdup(zombie, NOW) == "suspected by its probes (it beats, but its probes are slow)"
    quiet.last_beat = NOW + 1  # a beat stamped after ``now`` (clock skew) is not negative
    assert holdup(quiet, NOW) == "suspected (no heartbeat for 0.0 s)"


def test_one_sentence_groups_agents_by_reason_and_names_no_local_method() -> None:
    drained = agent("ledger-writer", state=Liveness.SUSPECTED)
    drained.draining = True
    text = none_can(CAP, [agent("z", state=Liveness.OFFLINE), drained,
                          agent("y", state=Liveness.OFFLINE)], NOW)
    assert text == (f"3 agent(s) declare {CAP!r} but none can take it now: ledger-writer "
                    f"drained by an operator; y, z offline; retry shortly")
    assert "reach.agents" not in text


def test_past_five_per_reason_the_rest_are_counted() -> None:
    many = [agent(f"a{i}", state=Liveness.OFFLINE) for i in range(7)]
    assert "a0, a1, a2, a3, a4 and 2 more offline" in none_can(CAP, many, NOW)
    assert "a0, a1, a2, a3, a4 offline; retry" in none_can(CAP, many[:5], NOW)  # five: all named


def test_when_nothing_holds_them_back_it_says_so() -> None:
    assert none_can(CAP, [agent("a")], NOW) == (
        f"1 agent(s) declare {CAP!r} but none can take it now: each is busy or being "
        f"probed; retry shortly")
