"""Column widths from the content and the room there is (pure: numbers in, numbers out).

Every column is as wide as its widest cell (or its header). When the table is wider than the
terminal, only the columns that allow it (``Column.shrink``: names, capabilities, errors)
give way, the widest first, never below their ``shrink`` width; what is cut ends in "…". A
name is therefore shown whole whenever it fits, and a cut one says that it was cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

ELLIPSIS = "…"


def fit(natural: Sequence[int], shrink: Sequence[int | None], room: int) -> list[int]:
    """The width of each column: ``natural`` (its widest cell) when everything fits in
    ``room``; otherwise the shrinkable columns (``shrink`` not None) are capped at one level,
    as high as the room allows, but not below their own ``shrink`` width (then the table is
    wider than the room, and scrolls)."""
    widths = list(natural)
    if sum(widths) <= room:
        return widths
    flexible = [i for i, floor in enumerate(shrink) if floor is not None and natural[i] > floor]
    if not flexible:
        return widths
    fixed = sum(w for i, w in enumerate(widths) if i not in flexible)
    budget = room - fixed

    def used(level: int) -> int:
        return sum(min(natural[i], max(shrink[i] or 0, level)) for i in flexible)

    low, high = 0, max(natural[i] for i in flexible)
    while low < high:  # the highest level whose columns still fit in the budget
        mid = (low + high + 1) // 2
        if used(mid) <= budget:
            low = mid
        else:
            high = mid - 1
    for i in flexible:
        widths[i] = min(natural[i], max(shrink[i] or 0, low))
    spare = budget - used(low)
    for i in sorted(flexible, key=lambda i: -natural[i]):  # a column's worth of rounding
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
