"""reach.core.backoff: nominal delays, the cap, both jitter shapes, and the callers' recipes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.backoff import Backoff


def test_nominal_doubles_from_base_until_the_cap() -> None:
    b = Backoff(base=0.5, factor=2.0, cap=30.0)
    assert [b.nominal(n) for n in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_nominal_of_a_negative_retry_is_the_first_delay() -> None:
    assert Backoff().nominal(-3) == Backoff().nominal(0) == 0.5


def test_nominal_survives_an_exponent_past_the_largest_float() -> None:
    assert Backoff(base=1.0, factor=10.0, cap=7.0).nominal(10_000) == 7.0


def test_without_jitter_delay_is_nominal_in_both_modes() -> None:
    rng = random.Random(1)
    for mode in ("around", "below"):
        b = Backoff(base=0.05, cap=2.0, jitter=0.0, mode=mode)
        assert [b.delay(n, rng) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]


def test_the_same_seed_gives_the_same_sequence() -> None:
    b = Backoff()
    first = [b.delay(n, random.Random(42)) for n in range(10)]
    assert [b.delay(n, random.Random(42)) for n in range(10)] == first


def test_around_spreads_three_synchronized_failures() -> None:
    rng = random.Random(7)
    delays = [Backoff().delay(0, rng) for _ in range(3)]
    assert len(set(delays)) == 3
    assert all(0.4 <= d <= 0.6 for d in delays)


def test_around_reflects_below_the_cap_instead_of_piling_up_on_it() -> None:
    b = Backoff(base=1.0, cap=10.0, jitter=0.2)
    rng = random.Random(3)
    delays = [b.delay(20, rng) for _ in range(2000)]
    assert max(delays) <= 10.0
    assert min(delays) >= 8.0
    assert sum(1 for d in delays if d == 10.0) <= 1  # not clamped onto the cap
    assert sum(1 for d in delays if d < 9.0) > 400  # the upper half folded down


def test_below_never_waits_longer_than_nominal() -> None:
    b = Backoff(base=1.0, factor=2.0, cap=30.0, jitter=0.5, mode="below")
    rng = random.Random(5)
    for n in range(10):
        raw = b.nominal(n)
        for _ in range(200):
            assert raw * 0.5 <= b.delay(n, rng) <= raw


def test_below_with_full_jitter_spans_zero_to_nominal() -> None:
    b = Backoff(base=4.0, cap=4.0, jitter=1.0, mode="below")
    rng = random.Random(11)
    delays = [b.delay(0, rng) for _ in range(2000)]
    assert 0.0 <= min(delays) < 0.1
    assert 3.9 < max(delays) <= 4.0


def test_below_matches_the_agent_sdk_reconnect_formula() -> None:
    """sdk/agent.py waited ``min(cap, base * 2 ** (failures - 1)) * uniform(0.5, 1.0)``."""
    base, cap = 0.1, 5.0
    b = Backoff(base=base, cap=cap, jitter=0.5, mode="below")
    ours, theirs = random.Random(9), random.Random(9)
    for failures in range(1, 15):
        expected = min(cap, base * 2 ** (failures - 1)) * theirs.uniform(0.5, 1.0)
        assert b.delay(failures - 1, ours) == expected


def test_nominal_matches_the_dashboard_reconnect_formula() -> None:
    """dashboard/app.py waited ``min(cap, base * 2 ** max(0, failures - 1))``, no jitter."""
    b = Backoff(base=0.25, cap=8.0, jitter=0.0)
    for failures in range(0, 12):
        assert b.nominal(failures - 1) == min(8.0, 0.25 * 2 ** max(0, failures - 1))


@pytest.mark.parametrize("kwargs", [{"mode": "sideways"}, {"mode": "below", "jitter": 1.5},
                                    {"mode": "below", "jitter": -0.1}])
def test_a_shape_that_makes_no_sense_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(retry=st.integers(min_value=0, max_value=200),
       seed=st.integers(min_value=0, max_value=2**32),
       base=st.floats(min_value=0.001, max_value=5),
       factor=st.floats(min_value=1.0, max_value=4),
       cap=st.floats(min_value=0.01, max_value=120),
       jitter=st.floats(min_value=0, max_value=1),
       mode=st.sampled_from(["around", "below"]))
def test_every_delay_is_within_its_band_and_the_cap(retry: int, seed: int, base: float,
                                                    factor: float, cap: float, jitter: float,
                                                    mode: str) -> None:
    b = Backoff(base=base, factor=factor, cap=cap, jitter=jitter, mode=mode)  # type: ignore[arg-type]
    raw = b.nominal(retry)
    assert raw == min(cap, base * factor ** retry) or raw == cap
    d = b.delay(retry, random.Random(seed))
    eps = 1e-9 * max(1.0, raw)
    assert 0.0 <= d <= cap
    low = raw * (1 - jitter) - eps
    high = raw if mode == "below" else raw * (1 + jitter)
    assert low <= d <= high + eps
    # Monotone without jitter: the next retry never waits less.
    assert b.nominal(retry + 1) >= raw
