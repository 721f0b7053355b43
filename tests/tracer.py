"""How much slower the suite's Python runs under coverage's line tracer, for the few limits
that are about the coordinator's own speed (the stall probes, the hostile-schema checks)."""

from __future__ import annotations

import sys

# CI runs the suite under coverage, which makes the coordinator's Python about twice as slow:
# the submit-burst test's p99 measured 20-24 ms without it and 50-52 ms with it, alone on a
# quiet machine. A limit that is about our speed doubles under the tracer; a loop that does
# not yield, or a check that is quadratic, still misses it by seconds.
SLOWDOWN = 2.0 if sys.gettrace() is not None else 1.0
