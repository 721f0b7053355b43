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

from collections import deque
from collections.abc import Sequence


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 ≤ q ≤ 1) of ``ordered``, a non-empty sequence sorted ascending."""
    if not 0.0 <= q <= 1.0 or not ordered:
        raise ValueError(f"percentile q={q!r} of {len(ordered)} samples: q must be in [0, 1] "
                         "and there must be samples")
    n = len(ordered)
    i = int(q * n)
    return ordered[i if i < n else n - 1]  # not min(): a builtin call costs 3x this line


class Window:
    """The last ``size`` samples; percentiles sort them once per change, when first read.

    Adding is an append (the oldest sample falls out); reading after a change sorts a copy,
    which later reads reuse until the next ``add``.
    """

    __slots__ = ("samples", "_sorted")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a window holds at least one sample, not {size!r}")
        self.samples: deque[float] = deque(maxlen=size)
        self._sorted: list[float] | None = None

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
        self.samples.append(sample)
        self._sorted = None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the samples kept (see ``percentile``); None while empty."""
        ordered = self._sorted
        if ordered is None:
            if not self.samples:
                return None
            ordered = self._sorted = sorted(self.samples)
        return percentile(ordered, q)
