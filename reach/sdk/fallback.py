"""A fallback result on the caller's side: what it says about itself.

    answer = await client.call("rates.get", {...}, fallback={"value": DEFAULT}, detail=True)
    if answer.fallback is not None:        # the capability could not answer
        log.info("served a %s fallback (%s)", answer.fallback.kind, answer.fallback.reason)
    handle = await client.submit("rates.get", {...}, fallback={"last_good": {"max_age_s": 60}})
    rates = await handle.result()          # the plain value, as always
    handle.fallback                        # None, or a Fallback once the result is in

``await client.call(...)`` keeps returning the plain value; ``detail=True`` returns an
``Answer`` instead. docs/protocol.md §7 says when a fallback is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Answer", "Fallback", "Fell", "answer_of", "outcome_of", "unwrap"]


@dataclass(frozen=True, slots=True)
class Fallback:
    """What a fallback result was: ``kind`` (value | last_good | capability), ``reason``
    (unavailable | fault | timeout | bad_result), the age of a last good result, and for a
    fallback to another capability its name and the task that answered."""

    kind: str
    reason: str
    age_s: float | None = None
    capability: str | None = None
    task_id: str | None = None

    @classmethod
    def from_wire(cls, label: dict[str, Any]) -> Fallback:
        age = label.get("age_s")
        return cls(str(label.get("kind", "")), str(label.get("reason", "")),
                   None if age is None else float(age), label.get("capability"),
                   label.get("task_id"))


@dataclass(frozen=True, slots=True)
class Answer:
    """``client.call(..., detail=True)``: the result, and what fallback it was (or None)."""

    value: Any
    fallback: Fallback | None = None


class Fell:
    """A fallback result on its way to its waiter (the client's outcome futures hold it)."""

    __slots__ = ("value", "label")

    def __init__(self, value: Any, label: dict[str, Any]) -> None:
        self.value = value
        self.label = label


def outcome_of(frame: Any) -> Any:
    """What a ``result`` frame's waiter gets: its result, or a ``Fell`` when it is labelled
    a fallback."""
    return frame.result if frame.fallback is None else Fell(frame.result, frame.fallback)


def unwrap(outcome: Any) -> tuple[Any, Fallback | None]:
    """(the plain value, its Fallback or None) of what an outcome future held."""
    if isinstance(outcome, Fell):
        return outcome.value, Fallback.from_wire(outcome.label)
    return outcome, None


def answer_of(outcome: Any, detail: bool) -> Any:
    """What ``client.call`` returns: the plain value, or with ``detail`` an ``Answer``."""
    value, fallback = unwrap(outcome)
    return Answer(value, fallback) if detail else value
