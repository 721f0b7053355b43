"""Fallbacks (pure): what a task answers when its capability cannot, and the last-good cache.

Teams fall back to a cached or default answer when a capability is down. A fallback is
declared by the capability (``CapabilitySpec.fallback``) or by the caller for one call
(``Submit.fallback``; the caller's wins), as exactly one of:

    {"value": <any JSON>}                              a static answer
    {"last_good": {"max_age_s": 600, "shared": false}} the last result for the same params
    {"capability": "other.cap"}                        another capability, routed as usual

It is used only when the task would otherwise be dead: no healthy agent, or every attempt
failed with faults, timeouts or lost connections (``reason``). Never for a deliberate
``TaskError`` answer (an answer is the answer), nor for anything refused at admission
(``invalid_params``, ``unauthorized``, ``no_route``, ``rejected``). A fallback's own task has
no fallback: a fallback to another capability is followed once, never in a loop.

Trust (DESIGN: "idempotency keys, status and results are private to their caller"): a last
good result is kept per caller principal, so caller B is never served what A's call
produced. Only the capability's own declaration may say ``shared: true``, and only for a
``scope="read"`` capability: then one entry serves every caller permitted to call it (the
agent's author says its results do not depend on who asks). A caller's ``shared`` is ignored:
a caller cannot decide to read other callers' results.

The cache (``LastGood``) is bounded in entries and bytes (least recently used out first), and
takes ``now`` as an argument like the rest of reach.core.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CAPABILITY", "LAST_GOOD", "VALUE", "LastGood", "Plan", "choose", "key_of", "label",
           "plan_of", "reason"]

VALUE, LAST_GOOD, CAPABILITY = "value", "last_good", "capability"
_ANYONE = "*"  # the owner of a shared entry


@dataclass(frozen=True, slots=True)
class Plan:
    """One declared fallback, as the gateway follows it."""

    kind: str                 # VALUE | LAST_GOOD | CAPABILITY
    value: Any = None         # VALUE: the answer
    max_age_s: float = 600.0  # LAST_GOOD: oldest result served
    shared: bool = False      # LAST_GOOD: one entry for every permitted caller
    capability: str = ""      # CAPABILITY: where to send the call instead


def plan_of(declared: Mapping[str, Any] | None) -> Plan | None:
    """The plan of a declaration validated on the wire (``protocol.fallback_of``)."""
    if declared is None:
        return None
    if VALUE in declared:
        return Plan(VALUE, value=declared[VALUE])
    if LAST_GOOD in declared:
        spec = declared[LAST_GOOD]
        return Plan(LAST_GOOD, max_age_s=float(spec["max_age_s"]), shared=bool(spec["shared"]))
    return Plan(CAPABILITY, capability=str(declared[CAPABILITY]))


def choose(caller: Plan | None, declared: Plan | None, *, scope: str) -> Plan | None:
    """The plan a task follows: the caller's, else the capability's. ``shared`` holds only as
    the capability declared it, for a read (see the module docstring)."""
    if caller is not None:
        if caller.shared:
            return Plan(caller.kind, caller.value, caller.max_age_s, False, caller.capability)
        return caller
    if declared is not None and declared.shared and scope != "read":
        return Plan(declared.kind, declared.value, declared.max_age_s, False,
                    declared.capability)
    return declared


def reason(dead: bool, error: Mapping[str, Any] | None) -> str | None:
    """Why a task that ends now may fall back, or None when it may not. ``dead``: it would
    be dead-lettered (an answer or a rejection ends a task as failed, never dead)."""
    if not dead or error is None:
        return None
    code = error.get("code")
    if code == "unavailable":
        return "unavailable"
    if code == "timeout":
        return "timeout"
    if code == "task_failed":
        remote = (error.get("details") or {}).get("remote") or {}
        return "bad_result" if remote.get("code") == "bad_result" else "fault"
    if code == "reach_error":
        return "fault"
    return None


def key_of(capability: str, params: Any, caller: str, shared: bool) -> str:
    """The cache key of a result: the capability, the params (canonical JSON) and the caller
    principal, or everyone for a shared entry."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return json.dumps([capability, _ANYONE if shared else caller, text])


def label(plan: Plan, why: str, *, age_s: float | None = None,
          task_id: str | None = None) -> dict[str, Any]:
    """What a fallback result says about itself (the result frame's and task view's
    ``fallback``): its kind, why, the age of a last good result, the other capability's task."""
    out: dict[str, Any] = {"kind": plan.kind, "reason": why}
    if plan.kind == LAST_GOOD:
        out["age_s"] = round(age_s or 0.0, 3)
    if plan.kind == CAPABILITY:
        out["capability"] = plan.capability
        out["task_id"] = task_id
    return out


class LastGood:
    """The last good result per key, at most ``max_entries`` and ``max_bytes`` (of the
    results' JSON text); the least recently stored or served goes first."""

    __slots__ = ("max_entries", "max_bytes", "size", "_entries")

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("the last-good cache needs room for one entry")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.size = 0
        self._entries: OrderedDict[str, tuple[Any, int, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: str, result: Any, size: int, now: float) -> bool:
        """Keep ``result`` (``size`` bytes) as the key's last good one; False when it is too
        big to keep at all (the previous one, if any, is dropped: it is no longer the last)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old[1]
        if size > self.max_bytes:
            return False
        self._entries[key] = (result, size, now)
        self.size += size
        while len(self._entries) > self.max_entries or self.size > self.max_bytes:
            _, (_, dropped, _) = self._entries.popitem(last=False)
            self.size -= dropped
        return True

    def get(self, key: str, max_age: float, now: float) -> tuple[Any, float] | None:
        """(result, its age in seconds) when one no older than ``max_age`` is kept."""
        found = self._entries.get(key)
        if found is None:
            return None
        result, _, at = found
        age = max(0.0, now - at)
        if age > max_age:
            return None
        self._entries.move_to_end(key)
        return result, age
