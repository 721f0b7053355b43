"""A recursion limit close above the caller, for tests of values nested past it."""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def shallow_recursion(frames: int = 300) -> Iterator[None]:
    """A recursion limit ``frames`` above here, so a too-deep value's RecursionError comes
    within a few hundred frames. At the default 1,000, a schema check's descent took ~10 ms of
    its 20 ms CPU budget under coverage, and on a CI run the budget's reason came first."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)
