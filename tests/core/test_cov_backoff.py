"""Backoff at huge retry numbers (a client that has reconnected for days, a task with a large
``max_retries``): the delay stays within [0, cap] in both jitter modes, with no
OverflowError, whatever the factor's type, and so does the gateway's retry delay."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core import policy
from reach.core.backoff import Backoff


@settings(max_examples=60, deadline=None)
@given(retry=st.integers(min_value=0, max_value=10**18),
       factor=st.floats(min_value=1.0, max_value=1e6),
       base=st.floats(min_value=1e-3, max_value=10.0),
       cap=st.floats(min_value=1e-3, max_value=3600.0),
       jitter=st.floats(min_value=0.0, max_value=1.0),
       mode=st.sampled_from(["around", "below"]),
       seed=st.integers(min_value=0, max_value=2**32))
def test_any_retry_number_gives_a_delay_within_the_cap(
        retry: int, factor: float, base: float, cap: float, jitter: float, mode: str,
        seed: int) -> None:
    b = Backoff(base=base, factor=factor, cap=cap, jitter=jitter, mode=mode)  # type: ignore[arg-type]
    assert b.nominal(retry) <= cap
    assert 0.0 <= b.delay(retry, random.Random(seed)) <= cap


def test_the_exponent_past_the_largest_float_is_the_cap_in_both_modes() -> None:
    rng = random.Random(5)
    for mode in ("around", "below"):
        b = Backoff(base=0.5, factor=2.0, cap=30.0, jitter=0.2, mode=mode)  # type: ignore[arg-type]
        assert b.nominal(2_000) == 30.0  # 2.0 ** 2000 overflows a float
        delays = [b.delay(10**9, rng) for _ in range(200)]
        assert all(0.0 <= d <= 30.0 for d in delays)
        assert len(set(delays)) > 100  # still jittered, not piled up at the cap


def test_an_integer_factor_overflowing_the_float_conversion_is_the_cap() -> None:
    b = Backoff(base=0.5, factor=3, cap=30.0, jitter=0.0)  # an int: 3 ** n is exact, then
    assert b.nominal(100_000) == 30.0  # too large to multiply by a float
    assert b.delay(100_000, random.Random(1)) == 30.0


def test_the_gateways_retry_delay_at_a_huge_retry_is_capped_and_bounded_by_the_deadline(
        ) -> None:
    b = Backoff(base=0.5, factor=2.0, cap=30.0, jitter=0.2)
    rng = random.Random(3)
    assert 0.0 <= policy.retry_delay(b, 10**12, rng, None) <= 30.0
    assert policy.retry_delay(b, 10**12, rng, 0.25) <= 0.25
    assert policy.retry_delay(b, 10**12, rng, -1.0) == 0.0  # a deadline already past


def test_an_integer_factor_at_a_huge_retry_is_the_cap_at_once() -> None:
    """3 ** 10**7 as an exact integer took ~2.8 s of CPU before the cap applied; at 10**9
    it would not end within the suite's timeout (the regression this guards)."""
    assert Backoff(base=0.5, factor=3, cap=30.0).nominal(10 ** 9) == 30.0
    assert Backoff(base=0.5, factor=3, cap=30.0).nominal(2) == 4.5
