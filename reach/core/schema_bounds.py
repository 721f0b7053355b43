"""What a params schema and one check against it may cost, and how going past is told.

A schema comes from the wire and is compiled and checked on the coordinator's loop, so both
are bounded: a schema's size and depth, a pattern's work, and each check's CPU time, counted
on this thread's CPU clock (time spent in other processes does not count, so a busy machine
does not refuse params it would accept when quiet). ``Run`` carries one check's budget into
the generated validator (reach.core.schema_codegen), which spends a step per subschema.

A full garbage collection that lands inside a check is not the check's cost: on a
coordinator's heap one takes 40–95 ms of this thread's CPU (docs/adapters.md), past the
whole budget, and would refuse params that fit. A check that overruns while one ran since
its clock started gets its budget once more, from then (once: so at most twice the budget).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

__all__ = ["CLOCK_EVERY", "CPU_CLOCK", "MAX_CHECK_SECONDS", "MAX_PATTERN_WORK",
           "MAX_REGEX_FORMAT_CHARS", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "Clock", "Overrun",
           "Run", "SchemaError"]

MAX_SCHEMA_BYTES = 8 * 1024  # of compact JSON text; compiling that much takes ~25 ms (see report)
MAX_SCHEMA_DEPTH = 32  # nested objects/arrays; pydantic models rarely pass 10
# CPU time (of this thread: time spent in other processes does not count, so a busy machine
# does not refuse params it would accept when quiet) one check may take before the params are
# refused. Legitimate params near the frame limit take a few ms (a 150k-item list: ~5 ms); the
# budget is there for schemas whose cost explodes (``$ref`` recursion under ``anyOf``).
MAX_CHECK_SECONDS = 0.02
CLOCK_EVERY = 256  # steps between looks at the clock (thread_time is a system call)
# A pattern search costs at most ~(string length x RE2 program size) steps even when RE2's DFA
# gives up; refusing longer products keeps one search to a few ms.
MAX_PATTERN_WORK = 4_000_000
MAX_REGEX_FORMAT_CHARS = 4096  # longest string the "regex" format will try to compile


Clock = Callable[[], float]  # seconds; the checks' budget is counted on one
CPU_CLOCK: Clock = time.thread_time  # this thread's CPU time: what a check's budget counts


class SchemaError(ValueError):
    """A declared params schema is refused: not a valid JSON schema, or not a safe one."""


class Overrun(Exception):
    """Raised inside a check that went past its budget; ``check`` turns it into a reason."""


class Run(dict[str, Callable[[str], bool]]):
    """Per-check state, riding in the ``custom_formats`` argument that every generated function
    takes and passes down to the ones it calls: the formats, and the CPU-time budget."""

    __slots__ = ("budget", "clock", "collections", "deadline", "steps")

    def __init__(self, formats: dict[str, Callable[[str], bool]]) -> None:
        super().__init__(formats)
        self.budget = MAX_CHECK_SECONDS
        self.clock: Clock = CPU_CLOCK
        self.deadline: float | None = None  # set at the first look at the clock
        # Full collections when the clock started; None once the check was given its second
        # budget (see the module doc).
        self.collections: int | None = None
        self.steps = CLOCK_EVERY

    def spend(self, steps: int = 1) -> None:
        self.steps -= steps
        if self.steps > 0:
            return
        self.steps = CLOCK_EVERY
        now = self.clock()
        if self.deadline is None:  # the first CLOCK_EVERY steps are not timed: a few µs
            self.deadline = now + self.budget
            self.collections = _full_collections()
        elif now > self.deadline:
            if self.collections is not None and _full_collections() != self.collections:
                self.collections, self.deadline = None, now + self.budget
                return
            raise Overrun("params are too costly to validate against this schema; "
                          "send smaller params")


def _full_collections() -> int:
    """How many full (oldest-generation) garbage collections this process has run."""
    return int(gc.get_stats()[-1]["collections"])
