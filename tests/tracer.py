"""How much slower the suite's Python runs here than where its few speed limits were set
(the stall probes, the hostile-schema checks): under coverage's line tracer, and on a slower
machine. Those limits are about the coordinator's own speed, so they scale with both; a loop
that does not yield, or a check that is quadratic, still misses them by seconds."""

from __future__ import annotations

import sys
import time

# CI runs the suite under coverage, which makes the coordinator's Python about twice as slow:
# the submit-burst test's p99 measured 20-24 ms without it and 50-52 ms with it, alone on a
# quiet machine.
TRACER = 2.0 if sys.gettrace() is not None else 1.0

# The machine: a fixed piece of plain Python (100,000 dict stores of a formatted string), the
# best of three, against the 15 ms it takes on the machines the limits were set on. (Measured
# 55-60 ms on the 2026-12-05 evening VM, whose raw relay floor was 4-6x below those machines'
# and on which the 50 ms stall probes failed on main: a limit in seconds is only a ratio to
# the machine it was measured on. Never below 1: a faster machine keeps the limits as set.)
REFERENCE = 0.015


def _work() -> float:
    started = time.perf_counter()
    d: dict[int, str] = {}
    for i in range(100_000):
        d[i % 512] = f"{i}:{i * 3}"
    return time.perf_counter() - started


_tracing = sys.gettrace()
sys.settrace(None)  # the machine alone (the tracer's share is TRACER)
try:
    MACHINE = max(1.0, min(_work() for _ in range(3)) / REFERENCE)
finally:
    sys.settrace(_tracing)

SLOWDOWN = TRACER * MACHINE
