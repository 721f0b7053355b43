"""The fallback declaration on the wire (reach.wire.fallbacks) and its label in the SDK
(reach.sdk.fallback): checked where it arrives, refused on the caller's side first."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reach.core.tasks import SubmitRequest
from reach.errors import InvalidParams, ProtocolError
from reach.sdk.fallback import Answer, Fallback, Fell, answer_of, outcome_of, unwrap
from reach.sdk.submits import check
from reach.wire import protocol as p


@pytest.mark.parametrize(("declared", "normal"), [
    ({"value": None}, {"value": None}),
    ({"value": [1]}, {"value": [1]}),
    ({"last_good": {}}, {"last_good": {"max_age_s": 600.0, "shared": False}}),
    ({"last_good": {"max_age_s": 5, "shared": True, "later": 1}},
     {"last_good": {"max_age_s": 5.0, "shared": True}}),
    ({"capability": "Rates.Cached"}, {"capability": "Rates.Cached"}),
    (None, None),
])
def test_declarations_are_normalized(declared: Any, normal: Any) -> None:
    assert p.fallback_of(declared) == normal


@pytest.mark.parametrize("bad", [
    {}, {"other": 1}, {"value": 1, "last_good": {}}, {"last_good": None},
    {"capability": None}, {"capability": ""}, {"last_good": {"max_age_s": 0}},
    {"last_good": {"max_age_s": 1e99}},
])
def test_anything_but_exactly_one_kind_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        p.fallback_of(bad)
    frame = {"type": "submit", "id": 1, "capability": "x", "fallback": bad}
    with pytest.raises(ProtocolError, match="fallback"):
        p.parse(json.dumps(frame))


def test_a_capability_spec_and_a_register_carry_one() -> None:
    reg = p.parse('{"type": "register", "name": "a", "capabilities": [{"name": "x", '
                  '"fallback": {"value": 0}}, {"name": "y"}]}')
    assert [c.fallback for c in reg.capabilities] == [{"value": 0}, None]


def test_the_sdk_refuses_a_bad_fallback_before_sending() -> None:
    with pytest.raises(InvalidParams, match="bad fallback"):
        check(SubmitRequest("x.y", fallback={"value": 1, "capability": "z"}))
    check(SubmitRequest("x.y", fallback={"value": 1}))


def test_labels_and_answers() -> None:
    label = {"kind": "last_good", "reason": "fault", "age_s": 3}
    assert Fallback.from_wire(label) == Fallback("last_good", "fault", 3.0)
    assert Fallback.from_wire({"kind": "capability", "reason": "timeout", "capability": "c",
                               "task_id": "t"}) == Fallback("capability", "timeout", None,
                                                            "c", "t")
    fell = Fell({"v": 1}, label)
    assert unwrap(fell) == ({"v": 1}, Fallback("last_good", "fault", 3.0))
    assert unwrap({"v": 1}) == ({"v": 1}, None)
    assert answer_of(fell, False) == {"v": 1}
    assert answer_of(fell, True) == Answer({"v": 1}, Fallback("last_good", "fault", 3.0))
    assert answer_of(5, True) == Answer(5, None)
    plain = p.Result(task_id="t", result=2)
    assert outcome_of(plain) == 2
    labelled = outcome_of(p.Result(task_id="t", result=2, fallback=label))
    assert isinstance(labelled, Fell) and labelled.value == 2 and labelled.label == label
