"""``Shelf``: records in a list, each knowing its position (pure; reach.core.agents uses it
for the ready, full and held shelves of a routing group)."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Shelf(Generic[T]):
    """Records in a list, each knowing its position: add, remove and index in O(1)."""

    __slots__ = ("items", "_pos")

    def __init__(self) -> None:
        self.items: list[T] = []
        self._pos: dict[T, int] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __contains__(self, record: object) -> bool:
        return record in self._pos

    def add(self, record: T) -> None:
        self._pos[record] = len(self.items)
        self.items.append(record)

    def remove(self, record: T) -> None:
        at = self._pos.pop(record)
        last = self.items.pop()
        if last is not record:  # the last one fills the hole
            self.items[at] = last
            self._pos[last] = at
