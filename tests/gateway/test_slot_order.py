"""The slot queue's order, against the rule it promises (reach/gateway/slots.py): of the
callers waiting, the one with the least unfinished work first; among its waiters, the
highest priority aged by time waited, then the oldest. Kept in heaps, it must wake in
exactly the order a scan of every waiter at every wake would."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from reach.gateway.slots import SlotQueue
from reach.testing import ManualClock

AGING = 50.0


def reference(waiters: list[tuple[int, float, str, int]], now: float,
              usage: dict[str, int]) -> int:
    """The waiter a full scan picks: (priority, since, caller, n) → its n."""
    least = min(usage[c] for _, _, c, _ in waiters)
    pool = [w for w in waiters if usage[w[2]] == least]
    return max(pool, key=lambda w: (w[0] + (now - w[1]) * AGING, -w[1], -w[3]))[3]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), callers=st.integers(1, 4))
def test_heaps_wake_in_the_order_a_full_scan_would(seed: int, n: int, callers: int) -> None:
    rng = random.Random(seed)
    woken: list[int] = []
    waiters = []
    for i in range(n):
        # (binary fractions: exact ties compare equal however the rule is computed)
        priority, since = rng.randint(0, 9), rng.randint(0, 128) / 64
        caller = f"c{rng.randrange(callers)}"
        waiters.append((priority, since, caller, i))
    given_up = set(rng.sample(range(n), n // 4))  # some leave before their turn
    usage = {f"c{k}": rng.randint(0, 3) for k in range(callers)}
    live = [w for w in waiters if w[3] not in given_up]
    queue2 = SlotQueue(AGING, ManualClock())
    tickets = {}
    for priority, since, caller, i in waiters:
        tickets[i] = queue2.enter("cap", priority, since, caller, lambda i=i: woken.append(i))
    for i in given_up:
        tickets[i].cancel()
    assert queue2.waiting("cap") == len(live)
    now = 5.0
    while live:
        expected = reference(live, now, usage)
        queue2.wake(["cap"], now, usage.__getitem__)
        assert woken[-1] == expected
        live = [w for w in live if w[3] != expected]
        usage[[w for w in waiters if w[3] == expected][0][2]] += 1  # it took a slot
    queue2.wake(["cap"], now, usage.__getitem__)
    assert queue2.capabilities() == [] and queue2.waiting("cap") == 0
