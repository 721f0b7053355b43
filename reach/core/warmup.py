"""Warm-up (pure): a new or recovered agent's share of the work ramps up instead of jumping.

FIELD (issue 13): "A newly connected agent got 9 of the first 20 calls at once (cold caches,
JIT, model load)". An agent starts warming when it joins (registers, or comes back online after
suspected/offline) and when its breaker closes after having been open. For ``period`` seconds
its *warm share* rises linearly from ``FLOOR`` to 1 (Envoy's slow-start window has the same
shape and the same 10 % floor); past the period it is 1 and nothing changes.

Routing (reach.core.routing) uses the shares to thin the candidates of one pick: the warmest
candidate always stays; each other one stays with probability ``share / warmest share``; the
strategy then chooses among those left as usual. So warm-up limits an agent's share, never its
availability: a warming agent that is the only candidate (or all candidates warm up together)
gets all the work, as it would without warm-up.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

FLOOR = 0.1  # the share a warming agent starts at: some work at once, to warm it up

T = TypeVar("T")


def share(elapsed: float, period: float, floor: float = FLOOR) -> float:
    """The warm share ``elapsed`` seconds into a warm-up of ``period`` seconds: ``floor`` at
    its start, rising linearly, 1.0 from ``period`` on (and for a period of 0)."""
    if elapsed >= period:
        return 1.0
    if elapsed <= 0.0:
        return floor
    return floor + (1.0 - floor) * elapsed / period


def thin(items: Sequence[T], shares: Sequence[float], rng: random.Random) -> list[T]:
    """The items that compete for one pick: each stays with probability ``its share / the
    largest share``, so the warmest ones always stay and the result is never empty."""
    top = max(shares)
    return [item for item, s in zip(items, shares, strict=True)
            if s >= top or rng.random() * top < s]
