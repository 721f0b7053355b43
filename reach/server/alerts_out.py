"""Alert delivery: each webhook gets a bounded queue and one worker that POSTs with retries.

``post`` never blocks and never grows memory without bound: past ``maxlen`` waiting
notifications the oldest is dropped and counted (a dead receiver costs the coordinator one
queue, never its loop). The worker sends one notification at a time, in order (a subject's
``firing`` before its ``resolved``), by the POST rules every notification of Reach shares
(``reach.server.outbound``: a connection error, a timeout, a 408, 425, 429 or 5xx answer is
retried after a jittered backoff, here on the coordinator's clock, up to the webhook's
``attempts``; any other answer is final; no redirect is followed). Every outcome is counted
(``stats``) and a notification given up on is logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

import aiohttp

from reach._version import __version__
from reach.alert_rules import Webhook
from reach.ports import Clock
from reach.server.outbound import post

log = logging.getLogger("reach.alerts")


@dataclass(slots=True)
class Counts:
    """What happened to one webhook's notifications so far."""

    delivered: int = 0
    failed: int = 0  # given up: attempts spent, or a final refusal
    dropped: int = 0  # pushed out of a full queue before a try
    attempts: int = 0  # POSTs made, retries included


class WebhookSender:
    """One webhook's queue and worker (``run``, owned by ``reach.server.alerting``)."""

    def __init__(self, hook: Webhook, clock: Clock, rng: random.Random, maxlen: int) -> None:
        self.hook = hook
        self.clock = clock
        self.rng = rng
        self.maxlen = maxlen
        self.counts = Counts()
        self._queue: deque[dict[str, Any]] = deque()
        self._ready = asyncio.Event()
        self._headers = {"Content-Type": "application/json",
                         "User-Agent": f"agent-reach/{__version__}", **dict(hook.headers)}

    @property
    def queued(self) -> int:
        return len(self._queue)

    def post(self, body: dict[str, Any]) -> None:
        """Queue one notification; returns at once."""
        if len(self._queue) >= self.maxlen:
            self._queue.popleft()
            self.counts.dropped += 1
            dropped = self.counts.dropped
            if dropped & (dropped - 1) == 0:  # at 1, 2, 4, 8, ... drops: a log line, not a flood
                log.warning("alert webhook %s: queue full (%d), dropped the oldest notification "
                            "(%d dropped so far)", self.hook.name, self.maxlen, dropped)
        self._queue.append(body)
        self._ready.set()

    def stats(self) -> dict[str, Any]:
        c = self.counts
        return {"webhook": self.hook.name, "url": self.hook.url, "queued": self.queued,
                "delivered": c.delivered, "failed": c.failed, "dropped": c.dropped,
                "attempts": c.attempts}

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Deliver queued notifications until cancelled."""
        while True:
            await self._ready.wait()
            while self._queue:
                await self._deliver(session, self._queue.popleft())
            self._ready.clear()

    async def _deliver(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> None:
        data = json.dumps(body, default=str, ensure_ascii=False).encode()
        hook, made = self.hook, 0

        def tried() -> None:
            nonlocal made
            made += 1
            self.counts.attempts += 1
        # The POST rules every notification shares (reach.server.outbound); the URL is the
        # operator's own, so it is not screened as a caller's would be.
        problem = await post(session, hook.url, data, self._headers, tries=hook.attempts,
                             backoff=hook.backoff, timeout=hook.timeout, rng=self.rng,
                             sleep=self.clock.sleep, tried=tried)
        if problem is None:
            self.counts.delivered += 1
            return
        self.counts.failed += 1
        log.warning("alert webhook %s: gave up on %s %s after %d attempt(s): %s", hook.name,
                    body.get("state"), body.get("id"), made, problem)
