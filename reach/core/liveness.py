"""Liveness: online → suspected → offline from missed heartbeats (pure; time is an argument).

A 20 s network blip once marked healthy agents offline and stormed the rest, so there are three
states, not two: ``suspected`` stops new work but forgets nothing, and a beat brings it back.
A closed socket makes an agent ``suspected`` at once (the agent SDK reconnects by itself);
only silence longer than ``offline_after`` beats makes it ``offline``. An agent ``held`` by
its probes (reach.core.probes: heartbeats fine, real work hangs) is suspected however it
beats; only a fast probe lifts the hold. Each agent may have its own ``LivenessPolicy`` (its
own heartbeat interval, ``bounded_interval``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Liveness(enum.StrEnum):
    ONLINE = "online"
    SUSPECTED = "suspected"
    OFFLINE = "offline"


@dataclass(frozen=True, slots=True)
class LivenessPolicy:
    """Thresholds in heartbeat intervals (field defaults: every 10 s, suspect 2, offline 3)."""

    interval: float = 10.0
    suspect_after: float = 2.0
    offline_after: float = 3.0
    # seconds of silence before suspected (the registry's sweep reads it for every agent due)
    suspect_span: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        if not 0 < self.suspect_after <= self.offline_after:
            raise ValueError("need 0 < suspect_after <= offline_after")
        object.__setattr__(self, "suspect_span", self.suspect_after * self.interval)


# An agent's own heartbeat interval is kept within these multiples of the coordinator's: a
# faster one than a quarter would beat faster than the liveness sweep looks, and the field's
# 1 s checks killed healthy agents on one GC pause; a slower one than 6× (60 s by default)
# would leave a dead agent routed to for minutes.
HEARTBEAT_LOW, HEARTBEAT_HIGH = 0.25, 6.0


def bounded_interval(asked: float | None, default: float) -> float:
    """The heartbeat interval an agent that asks for ``asked`` gets (None: ``default``)."""
    if asked is None:
        return default
    return min(max(asked, default * HEARTBEAT_LOW), default * HEARTBEAT_HIGH)


def judge(policy: LivenessPolicy, *, last_beat: float, now: float, connected: bool,
          draining: bool = False, held: bool = False) -> Liveness:
    """The liveness an agent has at ``now``, given its last sign of life (``held``: its
    probes say it does not work, whatever its beats say)."""
    missed = (now - last_beat) / policy.interval
    if missed > policy.offline_after:
        return Liveness.OFFLINE
    if not connected and draining:
        return Liveness.OFFLINE
    if not connected or draining or held or missed > policy.suspect_after:
        return Liveness.SUSPECTED
    return Liveness.ONLINE


def deadline(policy: LivenessPolicy, state: Liveness, last_beat: float) -> float | None:
    """When ``judge`` may next give a worse state than ``state`` if no beat comes: an online
    agent may be suspected after this time, a suspected one offline; None once offline.

    (Only silence moves the state with time; connecting, draining and beats are events the
    registry judges as they happen.)"""
    if state is Liveness.ONLINE:
        return last_beat + policy.suspect_after * policy.interval
    if state is Liveness.SUSPECTED:
        return last_beat + policy.offline_after * policy.interval
    return None


@dataclass(slots=True)
class StallGuard:
    """Whether the liveness sweep may judge now, given how late its tick came (pure: loop
    times are arguments).

    A coordinator that stood still (a long GC pause, a blocking call in a handler, a host that
    descheduled it) has beats waiting unread in its sockets. Judging before reading them marked
    agents that beat on time offline, and failed their work over to run twice. So a tick that
    comes more than a ``period`` late does not judge: the sweep waits for a tick on time, at
    most ``patience`` seconds, so a loop that stays overloaded still judges its agents."""

    period: float
    patience: float
    _since: float | None = None

    def may_judge(self, due: float, now: float) -> bool:
        if now - due <= self.period:
            self._since = None
            return True
        if self._since is None:
            self._since = now
        return now - self._since >= self.patience
