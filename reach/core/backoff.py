"""Exponential backoff with jitter (pure): how long to wait before retry number ``n``.

One class for every retry loop in Reach: the gateway's retries of a task, an agent's and a
client's reconnects, the dashboard's feed reconnects. Nothing here sleeps or reads a clock; the
caller passes the retry number and a ``random.Random`` (seed it for a reproducible sequence).

The un-jittered delay is ``base × factor^retry``, capped at ``cap``. Jitter spreads it, in one
of two shapes (``mode``):

    "around"   nominal × (1 ± jitter), uniformly; a draw above the cap is reflected below it
               (clamping would pile every late retry up at exactly the cap, re-synchronizing
               them). The gateway's default: jitter 0.2, base 0.5 s, ×2, cap 30 s.
    "below"    nominal × U(1 − jitter, 1): never more than the nominal delay. jitter 0.5 is
               "equal jitter", jitter 1.0 "full jitter" (U(0, nominal)) in the terms of AWS's
               "Exponential Backoff and Jitter". Suits reconnect loops, where one must not
               wait longer than the cap promised.

Field lesson behind it: three agents failed together and un-jittered retries made three
synchronized traffic spikes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

JitterMode = Literal["around", "below"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff: ``base × factor^retry``, capped at ``cap``, spread by ``jitter``.

    ``jitter`` is a share of the nominal delay (0 for none, at most 1); ``mode`` says where the
    spread goes (see the module docstring).
    """

    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2
    mode: JitterMode = "around"

    def __post_init__(self) -> None:
        if self.mode not in ("around", "below"):
            raise ValueError(f"Backoff mode must be 'around' or 'below', not {self.mode!r}")
        if self.mode == "below" and not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"Backoff jitter below the nominal delay must be in [0, 1], "
                             f"not {self.jitter!r}")

    def nominal(self, retry: int) -> float:
        """The delay before retry number ``retry`` without jitter (0 is the first retry; a
        negative number counts as 0): ``min(cap, base × factor^retry)``."""
        try:
            # (a float power: an integer factor would make 3 ** 10**7 an exact integer, seconds
            # of CPU, before min() ever saw it)
            return min(self.cap, self.base * float(self.factor) ** max(0, retry))
        except OverflowError:  # factor^retry past the largest float: far beyond any cap
            return self.cap

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first retry), jittered
        with ``rng``; always within [0, cap]."""
        raw = self.nominal(retry)
        if self.mode == "below":
            return raw * rng.uniform(1.0 - self.jitter, 1.0)
        spread = raw * self.jitter
        delay = raw + rng.uniform(-spread, spread)
        if delay > self.cap:  # reflect below the cap: clamping would re-synchronize retries there
            delay = 2 * self.cap - delay
        return max(0.0, delay)
