"""Capability tags for routing (pure): what an agent declares, what a caller asks for, a match.

An agent declares tags as strings on a capability (``CapabilitySpec.tags``, unchanged on the
wire): ``"region=eu"`` gives the tag ``region`` the value ``eu`` (split at the first ``=``),
``"gpu"`` is a plain tag (present, no value). A key may have several values (``"region=eu"``
and ``"region=eu-west"``). Nothing is trimmed or case-folded: ``"EU"`` is not ``"eu"``.

A caller asks with a mapping (``client.call(..., tags={"region": "eu", "gpu": True})``):

    "key": "value"   the agent declares ``key=value``
    "key": True      the agent declares ``key``, plain or with any value

Every requested tag must match (AND); an agent that declares more is still a match. Calls
without tags skip all of this (routing tests ``if tags`` and nothing else).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reach.errors import InvalidParams

Wanted = Mapping[str, "str | bool"]
"""What a caller asks for: tag key → required value, or ``True`` for "declared at all"."""
TagSet = Mapping[str, frozenset[str]]
"""What an agent declared: tag key → its values (empty for a plain tag)."""

MAX_WANTED = 16  # tags one call may ask for
MAX_LENGTH = 100  # characters of one key or one value (a declared tag is at most 100 too)
MAX_SHOWN = 50  # declared tags an error lists as available


def parse(declared: Iterable[str]) -> dict[str, frozenset[str]]:
    """The ``TagSet`` of a capability's declared tag strings."""
    values: dict[str, set[str]] = {}
    for tag in declared:
        key, eq, value = tag.partition("=")
        found = values.setdefault(key, set())
        if eq:
            found.add(value)
    return {key: frozenset(vals) for key, vals in values.items()}


def matches(have: TagSet, wanted: Wanted) -> bool:
    """Does an agent that declared ``have`` satisfy every tag in ``wanted``?"""
    for key, value in wanted.items():
        values = have.get(key)
        if values is None:
            return False
        if value is not True and value not in values:
            return False
    return True


def check(wanted: object) -> dict[str, str | bool] | None:
    """``wanted`` as a caller may send it, or ``InvalidParams`` saying what is wrong.

    None and an empty mapping ask for nothing (None is returned). Keys are 1–100 characters
    without ``=``; values are 1–100 character strings or ``True`` (not ``False``, numbers or
    lists); at most ``MAX_WANTED`` tags."""
    if wanted is None:
        return None
    if not isinstance(wanted, Mapping):
        raise InvalidParams(f"tags must be an object of tag → value, not "
                            f"{type(wanted).__name__}", reason="tags not an object")
    if len(wanted) > MAX_WANTED:
        raise InvalidParams(f"at most {MAX_WANTED} tags per call, not {len(wanted)}",
                            reason="too many tags")
    out: dict[str, str | bool] = {}
    for key, value in wanted.items():
        if not isinstance(key, str) or not 0 < len(key) <= MAX_LENGTH or "=" in key:
            raise InvalidParams(f"tag key {key!r} must be 1–{MAX_LENGTH} characters without "
                                f"'='", reason="bad tag key")
        if value is not True and not (isinstance(value, str) and 0 < len(value) <= MAX_LENGTH):
            raise InvalidParams(f"tag {key!r} must be a string of 1–{MAX_LENGTH} characters "
                                f"or true, not {value!r}"[:300], reason="bad tag value")
        out[key] = value
    return out or None


def describe(wanted: Wanted) -> str:
    """``wanted`` in the declared form, for messages: ``region=eu, gpu``."""
    return ", ".join(key if value is True else f"{key}={value}"
                     for key, value in wanted.items())


def available(declared: Iterable[TagSet], wanted: Wanted) -> list[str]:
    """The declared tags (of every group looked at) with a key the caller asked for, in the
    declared form, sorted, at most ``MAX_SHOWN``: what a caller could have asked for instead."""
    found: set[str] = set()
    for have in declared:
        for key in wanted:
            values = have.get(key)
            if values is not None:
                found.update((f"{key}={v}" for v in values) if values else (key,))
    return sorted(found)[:MAX_SHOWN]
