"""Column widths from the content and the room there is (pure: numbers in, numbers out).

Every column is as wide as its widest cell (or its header). When the table is wider than the
terminal, only the columns that allow it (``Column.shrink``: names, capabilities, errors)
give way, the widest first, never below their ``shrink`` width; what is cut ends in "…".
Lists and messages (capabilities, errors) give way before names (``Column.name``): a name is
cut only when the terminal is too narrow for it even with the lists at their floor, and a
cut one says that it was cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

ELLIPSIS = "…"


def fit(natural: Sequence[int], shrink: Sequence[int | None], room: int,
        rank: Sequence[int] | None = None) -> list[int]:
    """The width of each column: ``natural`` (its widest cell) when everything fits in
    ``room``; otherwise the shrinkable columns (``shrink`` not None) are capped at one level,
    as high as the room allows, but not below their own ``shrink`` width (then the table is
    wider than the room, and scrolls).

    ``rank`` orders who gives way: the columns of the lowest rank are capped first, and a
    column of a higher rank (a name) is cut only when those of lower ranks are at their
    floor and the table is still too wide. Without it, all shrinkable columns share one
    rank."""
    widths = list(natural)
    if sum(widths) <= room:
        return widths
    ranks = list(rank) if rank is not None else [0] * len(natural)
    flexible = [i for i, floor in enumerate(shrink) if floor is not None and natural[i] > floor]
    for level in sorted({ranks[i] for i in flexible}):
        group = [i for i in flexible if ranks[i] == level]
        fixed = sum(w for i, w in enumerate(widths) if i not in group)
        for i, width in _capped(natural, shrink, group, room - fixed).items():
            widths[i] = width
        if sum(widths) <= room:
            break
    return widths


def _capped(natural: Sequence[int], shrink: Sequence[int | None], group: Sequence[int],
            budget: int) -> dict[int, int]:
    """The widths of the columns ``group`` capped at one level to fit in ``budget``."""

    def used(level: int) -> int:
        return sum(min(natural[i], max(shrink[i] or 0, level)) for i in group)

    low, high = 0, max(natural[i] for i in group)
    while low < high:  # the highest level whose columns still fit in the budget
        mid = (low + high + 1) // 2
        if used(mid) <= budget:
            low = mid
        else:
            high = mid - 1
    widths = {i: min(natural[i], max(shrink[i] or 0, low)) for i in group}
    spare = budget - used(low)
    for i in sorted(group, key=lambda i: -natural[i]):  # a column's worth of rounding
        if spare <= 0:
            break
        if widths[i] < natural[i]:
            widths[i] += 1
            spare -= 1
    return widths


def cut(text: Text, width: int) -> Text:
    """``text`` within ``width`` cells, ending in "…" when it had to be cut."""
    if text.cell_len <= width:
        return text
    short = text.copy()
    short.truncate(max(1, width), overflow="ellipsis")
    return short
