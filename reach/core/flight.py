"""One attempt in flight, as a pure machine: how long to wait for it, and when it is given up.

An attempt runs under two deadlines (docs/protocol.md §8): the **ack** (the agent has the
work) and the **completion** (it is done), the completion clock restarting at a late ack.
This is the attempt level of the task's machine (DESIGN.md "A task's life is one pure
machine"): plain values in, the instant to wait until or the verdict out, no clock read, no
timer, no asyncio. ``reach.gateway.delivery`` carries it out with one deadline at a time
(an entry of the gateway's ``reach.gateway.deadlines.Deadlines``).

At most once (DESIGN.md): an attempt of a non-idempotent capability is **not** given up as
undelivered when its ack is late. The ack timeout is a suspicion, not proof: the SDK
acknowledges a write before it starts it, so an ack held up by a busy agent means the work
may be running, and sending it to another agent would run it twice. Such an attempt waits
for its completion deadline (the link's verdict, a result or the link's loss, may come
first). An idempotent one fails over at the ack timeout, since running it twice is harmless.

A timer that fires late because the loop itself stalled (a GC pause, a busy neighbour) may
find the answer already unread in the socket: it waits once more as long as it was late, so
a coordinator stall is not blamed on the agent.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Lateness of a timer (s) below which it counts as on time.
LAG_SLACK = 0.005
#: Why an attempt is given up: never acknowledged (idempotent only), or too slow.
UNDELIVERED, TIMEOUT = "undelivered", "timeout"


@dataclass(slots=True)
class Flight:
    """The deadlines of one attempt. Times are the clock's monotonic seconds.

    ``limit`` is the task's own deadline (the caller's ``timeout``), if any: a late ack never
    moves the completion deadline past it."""

    ack_at: float
    done_at: float
    completion: float
    idempotent: bool
    limit: float | None = None
    acked: bool = False
    extended: bool = False  # already waited once for a late timer

    @classmethod
    def start(cls, now: float, ack_timeout: float, completion: float, *, idempotent: bool,
              limit: float | None = None) -> Flight:
        """An attempt sent at ``now``."""
        return cls(now + ack_timeout, now + completion, completion, idempotent, limit)

    @property
    def due(self) -> float:
        """When the timer must next fire."""
        if self.acked or not self.idempotent:
            return self.done_at
        return min(self.ack_at, self.done_at)

    def ack(self, now: float) -> float | None:
        """The agent has the work: from now on only the completion deadline counts, and it
        runs from this ack when that is later (capped by ``limit``). Returns the instant the
        timer must fire at instead when the deadline moved, else None (a timer still armed
        for the ack deadline finds, when it fires, that only the completion counts)."""
        if self.acked:
            return None
        self.acked = True
        done_at = now + self.completion
        if self.limit is not None and done_at > self.limit:
            done_at = self.limit
        if done_at > self.done_at + LAG_SLACK:  # a late ack: the clock starts now
            self.done_at = done_at
            return done_at
        return None

    def expire(self, due: float, now: float) -> float | str:
        """The timer armed for ``due`` fired at ``now``: the instant to wait until next, or
        why the attempt is given up (``UNDELIVERED`` or ``TIMEOUT``)."""
        late = now - due
        if late > LAG_SLACK and not self.extended:
            self.extended = True
            return now + late
        if now < self.due:  # an earlier deadline passed that no longer counts
            return self.due
        if not self.acked and self.idempotent and now >= self.ack_at:
            return UNDELIVERED
        return TIMEOUT
