"""The error tree (reach/errors.py): codes, wire form and from_wire."""

from __future__ import annotations

import pytest

from reach import errors as e
from reach.errors import (
    Cancelled,
    InvalidParams,
    NoRoute,
    ProtocolError,
    ReachError,
    ReachTimeout,
    Rejected,
    TaskError,
    TaskFailed,
    Unauthorized,
    Unavailable,
    from_wire,
)

CODES = {
    NoRoute: "no_route",
    Unavailable: "unavailable",
    Rejected: "rejected",
    InvalidParams: "invalid_params",
    Unauthorized: "unauthorized",
    TaskFailed: "task_failed",
    ReachTimeout: "timeout",
    Cancelled: "cancelled",
    ProtocolError: "protocol_error",
}


def test_codes_are_stable():
    assert ReachError.code == "reach_error"
    for cls, code in CODES.items():
        assert cls.code == code
    assert TaskError.code == "task_failed"
    assert len(set(CODES.values())) == len(CODES)


def test_hierarchy():
    for cls in CODES:
        assert issubclass(cls, ReachError)
    assert issubclass(TaskError, TaskFailed)
    assert issubclass(ReachTimeout, TimeoutError)
    assert not issubclass(ProtocolError, TimeoutError)


def test_reach_timeout_is_caught_as_timeout_error():
    with pytest.raises(TimeoutError):
        raise ReachTimeout("no answer in 2 s", agent="inv")


@pytest.mark.parametrize(("cls", "code"), list(CODES.items()), ids=lambda x: getattr(x, "__name__", x))
def test_from_wire_rebuilds_each_code(cls, code):
    original = cls("something went wrong; do this next", capability="x.get", level=0.5)
    wire = original.to_wire()
    assert wire == {"code": code, "message": "something went wrong; do this next",
                    "details": {"capability": "x.get", "level": 0.5}}
    back = from_wire(wire)
    assert type(back) is cls
    assert back.code == code
    assert back.message == original.message == str(back)
    assert back.details == original.details


def test_task_error_answer_flag_rebuilds_task_error():
    wire = {"code": "task_failed", "message": "out of stock",
            "details": {"answer": True, "sku": "A-1"}}
    back = from_wire(wire)
    assert type(back) is TaskError
    assert isinstance(back, TaskFailed)
    assert back.details == {"answer": True, "sku": "A-1"}


@pytest.mark.parametrize("details", [{}, {"answer": False}, {"remote": {"type": "KeyError"}}])
def test_task_failed_without_answer_stays_task_failed(details):
    back = from_wire({"code": "task_failed", "message": "boom", "details": details})
    assert type(back) is TaskFailed


def test_task_error_sets_answer_and_round_trips():
    err = TaskError("no such sku", sku="Z")
    assert err.details == {"sku": "Z", "answer": True}
    back = from_wire(err.to_wire())
    assert type(back) is TaskError and back.details == err.details
    # An explicit answer=False is kept (setdefault, not overwrite).
    assert TaskError("x", answer=False).details["answer"] is False


def test_unknown_code_keeps_its_code_on_a_plain_reach_error():
    back = from_wire({"code": "quota_exceeded", "message": "slow down", "details": {"n": 1}})
    assert type(back) is ReachError
    assert back.code == "quota_exceeded"
    assert back.to_wire() == {"code": "quota_exceeded", "message": "slow down",
                              "details": {"n": 1}}
    assert ReachError.code == "reach_error"  # the instance, not the class, was changed


def test_from_wire_tolerates_missing_parts():
    back = from_wire({})
    assert type(back) is ReachError and back.code == "reach_error"
    assert back.message == "reach_error" and back.details == {}
    assert from_wire({"code": "unavailable"}).message == "unavailable"
    assert from_wire({"code": "no_route", "message": "m", "details": None}).details == {}


@pytest.mark.parametrize("code", ["task_failed", "unavailable", "no_route"])
def test_from_wire_with_message_in_details(code):
    back = from_wire({"code": code, "message": "outer",
                      "details": {"answer": True, "message": "inner"}})
    assert back.message == "outer"
    assert back.details["message"] == "inner"


def test_typed_accessors():
    assert NoRoute("x", suggestions=["a.b", "c.d"]).suggestions == ["a.b", "c.d"]
    assert NoRoute("x").suggestions == []
    assert Rejected("x", level=0.25).level == 0.25
    assert Rejected("x").level == 1.0
    assert TaskFailed("x", remote={"agent": "inv"}).remote == {"agent": "inv"}
    assert TaskFailed("x").remote == {}
    # Accessors return copies: callers cannot corrupt the error's details.
    err = NoRoute("x", suggestions=["a.b"])
    err.suggestions.append("zzz")
    assert err.suggestions == ["a.b"]


def test_from_wire_accessors_survive_the_wire():
    back = from_wire(NoRoute("m", suggestions=["sales.query"]).to_wire())
    assert back.suggestions == ["sales.query"]
    assert from_wire(Rejected("m", level=0.3).to_wire()).level == 0.3
    assert from_wire(TaskFailed("m", remote={"agent": "a"}).to_wire()).remote == {"agent": "a"}


def test_repr_names_class_and_message():
    assert repr(Unavailable("none online")) == "Unavailable('none online')"


def test_by_code_table_matches_classes():
    assert e._BY_CODE == {code: cls for cls, code in CODES.items()}
