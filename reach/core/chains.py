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
_INDEX = re.compile(r"0|[1-9][0-9]{0,17}")  # an array index in a pointer (RFC 6901)
_BAD_ESCAPE = re.compile(r"~(?![01])")  # RFC 6901: "~" escapes only "~0" and "~1"
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
                pointer and not pointer.startswith("/")) or _BAD_ESCAPE.search(pointer):
            raise ValueError(f"{where}: map[{param!r}] must be a JSON pointer: \"\" (the "
                             f"whole result) or starting with \"/\", e.g. \"/summary\" "
                             f"(\"~\" only as ~0 or ~1)")
    return Step(_name(capability, where), dict(mapping))


def _name(capability: str, where: str) -> str:
    try:
        return names.normalize(capability)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def follow_of(notify: str | None, then: Any) -> tuple[Step, ...]:
    """A submit's chain steps, its webhook URL checked too (``ValueError`` says what is wrong).
    The URL's shape only: where it may point is the coordinator's to judge (``notify_allow``)."""
    if notify is not None and (
            not isinstance(notify, str) or len(notify) > MAX_URL
            or _URL.fullmatch(notify) is None):
        raise ValueError(f"notify must be an http(s) URL of at most {MAX_URL} characters "
                         f"without spaces, e.g. https://example.com/hooks/reach")
    return steps_of(then)


def steps_json(steps: tuple[Step, ...]) -> list[str | dict[str, Any]]:
    """The steps as stored and shown (``steps_of`` reads them back)."""
    return [step.to_json() for step in steps]


# ------------------------------------------------------------------ passing a result on

class Unmapped(ValueError):
    """A result that cannot become the next step's params (not an object, a pointer that
    finds nothing): the chain stops there, with ``invalid_params`` naming the step."""


def resolve(document: Any, pointer: str) -> Any:
    """The value an RFC 6901 JSON pointer names in ``document`` (``""``: all of it). Raises
    ``Unmapped`` when it names nothing: a missing key, an index past the end or not a number,
    a step into a value that is neither an object nor an array."""
    if pointer == "":
        return document
    value = document
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, Mapping):
            if token not in value:
                raise Unmapped(f"{pointer!r}: the result has no {token!r}")
            value = value[token]
        elif isinstance(value, list):
            if _INDEX.fullmatch(token) is None or int(token) >= len(value):
                raise Unmapped(f"{pointer!r}: {token!r} is not an index of a "
                               f"{len(value)}-item array")
            value = value[int(token)]
        else:
            raise Unmapped(f"{pointer!r}: {token!r} steps into {_kind(value)}, not an "
                           f"object or array")
    return value


def params_for(step: Step, result: Any) -> dict[str, Any]:
    """The next step's params from the previous step's result: the result itself when the
    step maps nothing (it must then be a JSON object), else each mapped param's pointer's
    value. Raises ``Unmapped`` saying why not."""
    if step.map is None:
        if not isinstance(result, dict):
            raise Unmapped(f"the previous result is {_kind(result)}, not a JSON object, so "
                           f"it cannot be the params; give the step a \"map\" (e.g. "
                           f"{{\"value\": \"\"}})")
        return result
    return {param: resolve(result, pointer) for param, pointer in step.map.items()}


def _kind(value: Any) -> str:
    """What a JSON value is, with its article: "an array", "a number", "null"."""
    if value is None:
        return "null"
    return {bool: "a boolean", str: "a string", int: "a number", float: "a number",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def place(task_id: str, then: tuple[Step, ...], link: Link | None) -> Link:
    """A chain task's place: its own ``link``, or (the head, which has none) step 1 of all."""
    return link if link is not None else Link(task_id, 1, len(then) + 1)


def step_key(chain_key: str, step: int) -> str:
    """The idempotency key of a chain's step ``step`` (2 and on): the chain's key (the head's
    own key as its caller gave it, else the head's task id) and the step, so a chain resumed
    after a restart, or replayed, never creates a step twice."""
    return f"{chain_key}#{step}"


def chain_key(own_key: str, link: Link | None) -> str:
    """The chain's key, from a chain task's own (unscoped) key: a step's is ``step_key``'s."""
    return own_key if link is None or link.step == 1 else own_key.rpartition("#")[0]


def named(message: str, link: Link, capability: str) -> str:
    """An error message that says which step of its chain failed."""
    prefix = f"step {link.step} of {link.of} ({capability}): "
    return message if message.startswith(prefix) else prefix + message


# The notes a chain task's history keeps of where its chain went on (stored with it, so a
# restart knows which next steps exist): the next step's task id, or why it never started.
NEXT = "then: next step is task "
STOPPED = "then: chain stopped: "


def noted(note: str) -> bool:
    """Whether a history note is one of a chain's (not a change of the task's own state)."""
    return note.startswith((NEXT, STOPPED))


def next_of(history: list[tuple[str, float, str]]) -> str | None:
    """The task id of the next step this task's success started (None: none yet)."""
    for _state, _at, note in reversed(history):
        if note.startswith(NEXT):
            return note[len(NEXT):]
    return None


def stop_of(history: list[tuple[str, float, str]]) -> tuple[str, str] | None:
    """(error code, message) when the next step could not start (None: it did, or not yet)."""
    for _state, _at, note in reversed(history):
        if note.startswith(NEXT):
            return None
        if note.startswith(STOPPED):
            code, _, message = note[len(STOPPED):].partition(": ")
            return code, message
    return None


def view_of(task_id: str, then: tuple[Step, ...], link: Link | None,
            history: list[tuple[str, float, str]]) -> dict[str, Any]:
    """A chain task's ``chain`` in its view: ``head``, ``step``, ``of``, and once its success
    passed the result on, ``next`` (the next step's task id) or ``stopped`` (why not)."""
    out = place(task_id, then, link).to_json()
    if then:
        following = next_of(history)
        if following is not None:
            out["next"] = following
        else:
            stopped = stop_of(history)
            if stopped is not None:
                out["stopped"] = {"code": stopped[0], "message": stopped[1]}
    return out
