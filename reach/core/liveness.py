"""Liveness: online → suspected → offline from missed heartbeats (pure; time is an argument).

A 20 s network blip once marked healthy agents offline and stormed the rest, so there are three
states, not two: ``suspected`` stops new work but forgets nothing, and a beat brings it back.
A closed socket makes an agent ``suspected`` at once (the agent SDK reconnects by itself);
only silence longer than ``offline_after`` beats makes it ``offline``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


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

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        if not 0 < self.suspect_after <= self.offline_after:
            raise ValueError("need 0 < suspect_after <= offline_after")


def judge(policy: LivenessPolicy, *, last_beat: float, now: float, connected: bool,
          draining: bool = False) -> Liveness:
    """The liveness an agent has at ``now``, given its last sign of life."""
    missed = (now - last_beat) / policy.interval
    if missed > policy.offline_after:
        return Liveness.OFFLINE
    if not connected and draining:
        return Liveness.OFFLINE
    if not connected or draining or missed > policy.suspect_after:
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
