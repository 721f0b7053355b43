"""Counts kept in a dict (pure): one key per thing that has at least one, none at zero, so the
dict's size is the number of things counted (callers with work, addresses with pending
connections) and never grows with things that came and went."""

from __future__ import annotations

from collections.abc import Hashable, MutableMapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def add(counts: MutableMapping[K, int], key: K) -> None:
    counts[key] = counts.get(key, 0) + 1


def drop(counts: MutableMapping[K, int], key: K) -> None:
    """One fewer of ``key``; the key goes once none is left."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
