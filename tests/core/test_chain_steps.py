"""What a submit's ``then`` and ``notify`` may say (reach.core.chains.steps_of, follow_of):
each bound accepted at its edge and refused one past it, with a message saying what is wrong;
a step given as an object without ``map`` is a step by name."""

from __future__ import annotations

from typing import Any

import pytest

from reach.core.chains import Step, follow_of, next_of, steps_of, stop_of


def test_a_step_object_without_a_map_is_a_step_by_name() -> None:
    assert steps_of([{"capability": "Report.Write"}]) == (Step("report.write"),)
    assert steps_of({"capability": "mail.send", "map": {"to": "/owner"}}) == (
        Step("mail.send", {"to": "/owner"}),)


@pytest.mark.parametrize(("then", "error"), [
    ([{"capability": 7}], "\"capability\" must be a capability name"),
    ([{"map": {"a": "/a"}}], "\"capability\" must be a capability name"),
    (["s"] * 9, "then: 9 steps, at most 8"),
    ([{"capability": "a.b", "map": {f"p{i}": "/x" for i in range(33)}}],
     "\"map\" names 33 params, at most 32"),
    ([{"capability": "a.b", "map": {"": "/x"}}], "a mapped param name must be 1-200"),
    ([{"capability": "a.b", "map": {"p" * 201: "/x"}}], "a mapped param name must be 1-200"),
    ([{"capability": "a.b", "map": {"p": "/" + "x" * 500}}], "must be a JSON pointer"),
    ([{"capability": "a.b", "map": {"p": 5}}], "must be a JSON pointer"),
])
def test_a_chain_past_a_bound_is_refused_saying_which(then: Any, error: str) -> None:
    with pytest.raises(ValueError, match="then") as refused:
        steps_of(then)
    assert error in str(refused.value)


def test_every_bound_is_accepted_at_its_edge() -> None:
    assert len(steps_of(["s.t"] * 8)) == 8
    wide = {f"p{i}": "/x" for i in range(31)} | {"p" * 200: "/" + "x" * 499}
    (step,) = steps_of([{"capability": "a.b", "map": wide}])
    assert step.map == wide and len(wide) == 32


@pytest.mark.parametrize("notify", [
    "https://hooks.example/" + "x" * (2000 - 22), "http://h", "HTTPS://H/x?y#z"])
def test_a_webhook_url_of_up_to_2000_characters_is_accepted(notify: str) -> None:
    assert follow_of(notify, None) == ()


@pytest.mark.parametrize("notify", [
    "https://hooks.example/" + "x" * (2001 - 22), "ftp://h/x", "https://h/a b", 42, ""])
def test_a_webhook_that_is_not_an_http_url_is_refused(notify: Any) -> None:
    with pytest.raises(ValueError, match="notify must be an http"):
        follow_of(notify, ["s.t"])


def test_the_latest_next_step_wins_over_an_earlier_stop() -> None:
    history = [("succeeded", 1.0, "then: chain stopped: unavailable: no agent"),
               ("succeeded", 2.0, "then: next step is task t-2")]
    assert next_of(history) == "t-2" and stop_of(history) is None
    assert next_of(history[:1]) is None
    assert stop_of(history[:1]) == ("unavailable", "no agent")
