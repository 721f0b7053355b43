"""reach.core.fallback: plans, who they apply to, when, their labels, and the last-good cache."""

from __future__ import annotations

import json

import pytest

from reach.core import fallback as fb
from reach.core.fallback import LastGood, Plan, choose, key_of, label, plan_of, reason


def test_plans_of_each_declaration() -> None:
    assert plan_of(None) is None
    assert plan_of({"value": None}) == Plan("value", value=None)
    assert plan_of({"value": {"a": 1}}) == Plan("value", value={"a": 1})
    assert plan_of({"last_good": {"max_age_s": 30, "shared": True}}) == Plan(
        "last_good", max_age_s=30.0, shared=True)
    unshared = plan_of({"last_good": {"max_age_s": 30, "shared": False}})
    assert unshared is not None and unshared.shared is False
    assert plan_of({"capability": "rates.cached"}) == Plan("capability",
                                                           capability="rates.cached")
    assert (fb.VALUE, fb.LAST_GOOD, fb.CAPABILITY) == ("value", "last_good", "capability")


def test_a_plans_defaults() -> None:
    plan = Plan("value")
    assert (plan.value, plan.max_age_s, plan.shared, plan.capability) == (None, 600.0, False, "")


def test_the_callers_plan_wins_and_may_not_share() -> None:
    mine = Plan("last_good", max_age_s=5.0, shared=True)
    theirs = Plan("value", value=1)
    assert choose(mine, theirs, scope="read") == Plan("last_good", max_age_s=5.0, shared=False)
    caller = Plan("capability", capability="x.y")
    assert choose(caller, theirs, scope="read") is caller
    assert choose(None, theirs, scope="write") is theirs
    assert choose(None, None, scope="read") is None


def test_a_capability_may_share_its_last_good_only_for_a_read() -> None:
    shared = Plan("last_good", max_age_s=9.0, shared=True)
    assert choose(None, shared, scope="read") is shared
    assert choose(None, shared, scope="write") == Plan("last_good", max_age_s=9.0,
                                                       shared=False)


@pytest.mark.parametrize(("error", "why"), [
    ({"code": "unavailable"}, "unavailable"),
    ({"code": "timeout"}, "timeout"),
    ({"code": "task_failed", "details": {"remote": {"code": "task_failed"}}}, "fault"),
    ({"code": "task_failed", "details": {"remote": {"code": "bad_result"}}}, "bad_result"),
    ({"code": "task_failed", "details": {"remote": {"code": "lost"}}}, "fault"),
    ({"code": "task_failed"}, "fault"),
    ({"code": "task_failed", "details": None}, "fault"),
    ({"code": "reach_error"}, "fault"),
    ({"code": "invalid_params"}, None),
    ({"code": "unauthorized"}, None),
    ({"code": "rejected"}, None),
    ({}, None),
])
def test_the_reasons_a_dead_task_may_fall_back(error: dict[str, object], why: str | None
                                               ) -> None:
    assert reason(True, error) == why


def test_a_task_that_is_not_dead_never_falls_back() -> None:
    assert reason(False, {"code": "unavailable"}) is None  # failed: an answer or rejected
    assert reason(True, None) is None


def test_keys_are_per_caller_unless_shared_and_ignore_key_order() -> None:
    a = key_of("c", {"x": 1, "y": [1, 2]}, "alice", False)
    assert a == key_of("c", {"y": [1, 2], "x": 1}, "alice", False)
    assert a != key_of("c", {"x": 1, "y": [1, 2]}, "bob", False)
    assert a != key_of("d", {"x": 1, "y": [1, 2]}, "alice", False)
    assert key_of("c", {"x": 1}, "alice", True) == key_of("c", {"x": 1}, "bob", True)
    assert json.loads(key_of("c", {"名": "东", "a": 1}, "alice", False)) == [
        "c", "alice", '{"a":1,"\\u540d":"\\u4e1c"}']
    assert json.loads(key_of("c", {}, "alice", True))[1] == "*"


def test_labels_say_kind_reason_and_what_kind_adds() -> None:
    assert label(Plan("value"), "unavailable") == {"kind": "value", "reason": "unavailable"}
    assert label(Plan("last_good"), "fault", age_s=1.23456) == {
        "kind": "last_good", "reason": "fault", "age_s": 1.235}
    assert label(Plan("last_good"), "fault") == {"kind": "last_good", "reason": "fault",
                                                 "age_s": 0.0}
    assert label(Plan("capability", capability="o.c"), "timeout", task_id="t1") == {
        "kind": "capability", "reason": "timeout", "capability": "o.c", "task_id": "t1"}


def test_last_good_serves_within_its_age() -> None:
    cache = LastGood(10, 1000)
    assert cache.get("k", 60, 0.0) is None
    assert cache.put("k", {"v": 1}, 10, 100.0)
    assert cache.get("k", 60, 130.0) == ({"v": 1}, 30.0)
    assert cache.get("k", 60, 160.0) == ({"v": 1}, 60.0)  # exactly max_age: still served
    assert cache.get("k", 60, 160.5) is None
    assert cache.get("k", 60, 90.0) == ({"v": 1}, 0.0)  # a clock that stepped back


def test_last_good_keeps_the_latest_per_key_and_counts_bytes() -> None:
    cache = LastGood(10, 100)
    cache.put("k", 1, 40, 1.0)
    cache.put("k", 2, 30, 2.0)
    assert (len(cache), cache.size) == (1, 30)
    assert cache.get("k", 60, 2.0) == (2, 0.0)


def test_last_good_drops_the_least_recently_used_past_its_entries() -> None:
    cache = LastGood(2, 1000)
    cache.put("a", 1, 1, 0.0)
    cache.put("b", 2, 1, 0.0)
    assert cache.get("a", 60, 0.0) is not None  # a is used: b is now the oldest
    cache.put("c", 3, 1, 0.0)
    assert cache.get("b", 60, 0.0) is None
    assert cache.get("a", 60, 0.0) == (1, 0.0) and cache.get("c", 60, 0.0) == (3, 0.0)
    assert (len(cache), cache.size) == (2, 2)


def test_last_good_drops_past_its_bytes_and_refuses_what_never_fits() -> None:
    cache = LastGood(10, 100)
    cache.put("a", 1, 60, 0.0)
    cache.put("b", 2, 40, 0.0)
    assert (len(cache), cache.size) == (2, 100)  # exactly full: both kept
    cache.put("c", 3, 1, 0.0)
    assert cache.get("a", 60, 0.0) is None and cache.size == 41
    assert cache.put("big", 4, 101, 0.0) is False
    assert cache.get("big", 60, 0.0) is None and cache.size == 41
    assert cache.put("b", 5, 101, 0.0) is False  # too big: the old b is no longer the last
    assert cache.get("b", 60, 0.0) is None and cache.size == 1
    assert cache.put("d", 6, 100, 0.0) is True and cache.size == 100


def test_last_good_needs_room_for_one() -> None:
    for entries, size in ((0, 10), (10, 0)):
        with pytest.raises(ValueError, match="room for one"):
            LastGood(entries, size)
    LastGood(1, 1)
