"""Result chains: what a submit's ``then`` asks for, checked once at the door (pure).

``then="report.build"`` or ``then=["a.b", {"capability": "c.d", "map": {"text": "/summary"}}]``:
when the task succeeds, its result becomes the params of the next step, each step a task of
its own in the same trace. A step's ``map`` names, for each of its params, an RFC 6901 JSON
pointer into the previous step's result (``""`` is the whole result); without one, the result
itself is the params. No code runs: a pointer only reads.

A step's place in its chain is a ``Link``: the head task's id, the step's number (1 is the head)
and how many steps there are in all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reach.core import names

MAX_STEPS = 8  # steps after the head
MAX_MAP = 32  # params one step maps
MAX_POINTER = 500  # characters of one pointer
MAX_URL = 2000  # characters of a webhook URL
_URL = re.compile(r"https?://[^\s/?#]+(?:[/?#]\S*)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a chain: the capability it calls, and how its params come from the
    previous result (``None``: the result is the params)."""

    capability: str
    map: Mapping[str, str] | None = None

    def to_json(self) -> str | dict[str, Any]:
        """As a caller writes it (a name alone when it maps nothing)."""
        if self.map is None:
            return self.capability
        return {"capability": self.capability, "map": dict(self.map)}


@dataclass(frozen=True, slots=True)
class Link:
    """A chain step's place: its head's task id, its number (1: the head), of how many."""

    head: str
    step: int
    of: int

    def to_json(self) -> dict[str, Any]:
        return {"head": self.head, "step": self.step, "of": self.of}


def steps_of(value: Any) -> tuple[Step, ...]:
    """The steps ``then`` asks for, checked: a capability name, or a list of names and
    ``{"capability": name, "map": {param: pointer}}`` objects, at most ``MAX_STEPS``.
    Raises ``ValueError`` saying what is wrong; ``None`` or an empty list is no chain."""
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError("then: give a capability name or a list of steps")
    if len(value) > MAX_STEPS:
        raise ValueError(f"then: {len(value)} steps, at most {MAX_STEPS}")
    return tuple(_step(item, i) for i, item in enumerate(value, start=2))


def _step(item: Any, number: int) -> Step:
    where = f"then, step {number}"
    if isinstance(item, Step):
        return item
    if isinstance(item, str):
        return Step(_name(item, where))
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: give a capability name or {{\"capability\", \"map\"}}")
    extra = set(item) - {"capability", "map"}
    if extra:
        raise ValueError(f"{where}: unknown field(s) {sorted(extra)}; a step has "
                         f"\"capability\" and an optional \"map\"")
    capability = item.get("capability")
    if not isinstance(capability, str):
        raise ValueError(f"{where}: \"capability\" must be a capability name")
    mapping = item.get("map")
    if mapping is None:
        return Step(_name(capability, where))
    if not isinstance(mapping, Mapping) or not mapping:
        raise ValueError(f"{where}: \"map\" must be an object of param name -> JSON pointer")
    if len(mapping) > MAX_MAP:
        raise ValueError(f"{where}: \"map\" names {len(mapping)} params, at most {MAX_MAP}")
    for param, pointer in mapping.items():
        if not isinstance(param, str) or not param or len(param) > 200:
            raise ValueError(f"{where}: a mapped param name must be 1-200 characters")
        if not isinstance(pointer, str) or len(pointer) > MAX_POINTER or (
                pointer and not pointer.startswith("/")):
            raise ValueError(f"{where}: map[{param!r}] must be a JSON pointer: \"\" (the "
                             f"whole result) or starting with \"/\", e.g. \"/summary\"")
    return Step(_name(capability, where), dict(mapping))


def _name(capability: str, where: str) -> str:
    try:
        return names.normalize(capability)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def follow_of(notify: str | None, then: Any) -> tuple[str | None, tuple[Step, ...]]:
    """A submit's webhook URL and chain steps, checked (``ValueError`` says what is wrong).
    The URL's shape only: where it may point is the coordinator's to judge (``notify_allow``)."""
    if notify is not None and (
            not isinstance(notify, str) or len(notify) > MAX_URL
            or _URL.fullmatch(notify) is None):
        raise ValueError(f"notify must be an http(s) URL of at most {MAX_URL} characters "
                         f"without spaces, e.g. https://example.com/hooks/reach")
    return notify, steps_of(then)


def steps_json(steps: tuple[Step, ...]) -> list[str | dict[str, Any]]:
    """The steps as stored and shown (``steps_of`` reads them back)."""
    return [step.to_json() for step in steps]
