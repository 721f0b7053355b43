"""Rolling samples and their percentiles (pure): one window, one percentile rule.

The completion timeout (P95 of a capability's last 50 successes) and the call metrics (p50 to
p99 of the last 1,000 per capability, per agent and in total) read the same kind of window.

The percentile rule is ``ordered[min(n - 1, floor(q × n))]``: the smallest sample with *more*
than ``q`` of the samples at or below it (the largest sample when ``q`` is 1). It is a sample,
never an interpolation, so a p95 is a latency that really happened. It is one rank above the
textbook nearest-rank percentile when ``q × n`` is a whole number (p99 of 100 samples is the
largest one, not the 99th): a timeout built on it errs long, not short.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Sequence


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 ≤ q ≤ 1) of ``ordered``, a non-empty sequence sorted ascending."""
    if not 0.0 <= q <= 1.0 or not ordered:
        raise ValueError(f"percentile q={q!r} of {len(ordered)} samples: q must be in [0, 1] "
                         "and there must be samples")
    n = len(ordered)
    i = int(q * n)
    return ordered[i if i < n else n - 1]  # not min(): a builtin call costs 3x this line


class Window:
    """The last ``size`` samples, also kept in order: a percentile is one index, whenever read.

    Adding bisects the new sample into the ordered copy and the oldest out of it (past
    ``size``): two moves inside one list, never a sort. The completion timeout reads a P95
    on every attempt, so sorting on read (as this did) re-sorted after every success.
    """

    __slots__ = ("samples", "_sorted")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a window holds at least one sample, not {size!r}")
        self.samples: deque[float] = deque(maxlen=size)
        self._sorted: list[float] = []

    @property
    def size(self) -> int:
        """How many samples the window keeps."""
        maxlen = self.samples.maxlen
        assert maxlen is not None
        return maxlen

    def __len__(self) -> int:
        return len(self.samples)

    def add(self, sample: float) -> None:
        """Keep ``sample``; past ``size`` samples the oldest is dropped."""
        samples, ordered = self.samples, self._sorted
        if len(samples) == samples.maxlen:
            del ordered[bisect_left(ordered, samples[0])]
        samples.append(sample)
        insort(ordered, sample)

    def fill(self, oldest_first: Iterable[float]) -> None:
        """Add many samples at once (oldest first): one sort, not one bisect each."""
        self.samples.extend(oldest_first)
        self._sorted = sorted(self.samples)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the samples kept (see ``percentile``); None while empty."""
        ordered = self._sorted
        return percentile(ordered, q) if ordered else None


DAY = 86_400.0
MIN_CALLS = 20  # fewer judged calls than this over the horizon: no evidence, full trust
TRUSTED = 0.99  # a success rate this high or better counts as perfect


class DayRate:
    """Successes and faults per day over the last ``days`` days (one pair of counts per day:
    bounded memory whatever the traffic). Days are ``floor(now / length)``; a day's counts
    drop out once ``days`` newer days have begun."""

    __slots__ = ("days", "length", "stamp", "ok", "bad", "_trust", "_until", "_sure")

    def __init__(self, days: int = 7, length: float = DAY) -> None:
        if days < 1 or length <= 0:
            raise ValueError(f"a day rate needs days >= 1 and length > 0, not {days}, {length}")
        self.days, self.length = days, length
        self.stamp = [-1] * days  # which day each slot holds (-1: none yet)
        self.ok = [0] * days
        self.bad = [0] * days
        self._trust = 1.0
        # Until when ``_trust`` holds: the end of the day it was worked out for; no call yet:
        # full trust for ever; -inf after an add (stale at any clock reading, even below 0).
        self._until = math.inf
        # ``_trust`` is 1.0 from MIN_CALLS or more calls at TRUSTED or better: a success the
        # same day leaves it so (it only raises the rate), so it need not be worked out again.
        self._sure = False

    def add(self, ok: bool, now: float) -> None:
        """Count one judged call: a success (``ok``) or a fault."""
        day = int(now // self.length)
        i = day % self.days
        if self.stamp[i] != day:
            self.stamp[i], self.ok[i], self.bad[i] = day, 0, 0
        if ok:
            self.ok[i] += 1
            if self._sure and now < self._until:
                return
        else:
            self.bad[i] += 1
        self._until = -math.inf

    def counts(self, now: float) -> tuple[int, int]:
        """(successes, faults) of the last ``days`` days, today included."""
        day = int(now // self.length)
        ok = bad = 0
        for i, stamp in enumerate(self.stamp):
            if day - self.days < stamp <= day:
                ok += self.ok[i]
                bad += self.bad[i]
        return ok, bad

    def rate(self, now: float) -> float | None:
        """The success rate over the horizon; None without any judged call in it."""
        ok, bad = self.counts(now)
        return ok / (ok + bad) if ok + bad else None

    def trust(self, now: float) -> float:
        """The factor the weighted routing score multiplies by (``reliability``), worked out
        at most once a day and after each ``add``: a constant-time read on the hot path."""
        if now < self._until:
            return self._trust
        day = now // self.length
        ok, bad = self.counts(now)
        self._trust = reliability(ok, bad)
        self._sure = self._trust == 1.0 and ok + bad >= MIN_CALLS
        self._until = (day + 1) * self.length
        return self._trust


def reliability(ok: int, bad: int) -> float:
    """The success rate, except 1.0 below ``MIN_CALLS`` calls (too little to judge) and at
    ``TRUSTED`` or better (a rare fault must not cost an agent every idle tie)."""
    n = ok + bad
    if n < MIN_CALLS:
        return 1.0
    rate = ok / n
    return 1.0 if rate >= TRUSTED else rate
