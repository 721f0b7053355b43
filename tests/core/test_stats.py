"""reach.core.stats: the percentile rule against a sorted-list reference, and the window."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.core.stats import Window, percentile


def reference(values: list[float], q: float) -> float:
    """The smallest sample with more than ``q`` of the samples at or below it; the largest
    sample when there is none (q = 1). Written from the definition, not the formula."""
    ordered = sorted(values)
    for v in ordered:
        if sum(1 for x in ordered if x <= v) > q * len(ordered):
            return v
    return ordered[-1]


def test_percentiles_of_one_to_a_hundred() -> None:
    ordered = [float(v) for v in range(1, 101)]
    assert [percentile(ordered, q) for q in (0.0, 0.5, 0.9, 0.95, 0.99, 1.0)] == \
        [1.0, 51.0, 91.0, 96.0, 100.0, 100.0]


def test_p95_of_fifty_is_the_forty_eighth() -> None:
    assert percentile([float(v) for v in range(1, 51)], 0.95) == 48.0


def test_one_sample_is_every_percentile() -> None:
    assert {percentile([0.3], q) for q in (0.0, 0.25, 0.5, 0.99, 1.0)} == {0.3}


@pytest.mark.parametrize("q", [-0.01, 1.01, math.nan])
def test_q_outside_zero_to_one_is_refused(q: float) -> None:
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0, 2.0], q)


def test_no_samples_is_refused() -> None:
    with pytest.raises(ValueError, match="samples"):
        percentile([], 0.5)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=200),
       q=st.floats(min_value=0.0, max_value=1.0))
def test_percentile_agrees_with_the_reference(values: list[float], q: float) -> None:
    assert percentile(sorted(values), q) == reference(values, q)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(min_value=0, max_value=1e4), min_size=1, max_size=100),
       a=st.floats(min_value=0.0, max_value=1.0), b=st.floats(min_value=0.0, max_value=1.0))
def test_percentile_grows_with_q(values: list[float], a: float, b: float) -> None:
    ordered = sorted(values)
    lo, hi = sorted((a, b))
    assert percentile(ordered, lo) <= percentile(ordered, hi)


def test_an_empty_window_has_no_quantile() -> None:
    w = Window(10)
    assert (len(w), w.size, w.quantile(0.5)) == (0, 10, None)


def test_the_window_keeps_only_the_last_size_samples() -> None:
    w = Window(3)
    for v in (10.0, 20.0, 30.0, 1.0, 2.0):
        w.add(v)
    assert list(w.samples) == [30.0, 1.0, 2.0] and len(w) == 3
    assert w.quantile(0.0) == 1.0 and w.quantile(1.0) == 30.0


def test_adding_invalidates_what_was_read() -> None:
    w = Window(50)
    for _ in range(10):
        w.add(1.0)
    assert w.quantile(0.95) == 1.0
    for _ in range(10):
        w.add(9.0)
    assert w.quantile(0.95) == 9.0
    assert w.quantile(0.25) == 1.0  # another q of the same samples


def test_a_window_needs_room_for_a_sample() -> None:
    with pytest.raises(ValueError):
        Window(0)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.floats(min_value=0, max_value=1e4), max_size=150),
       size=st.integers(min_value=1, max_value=60),
       q=st.floats(min_value=0.0, max_value=1.0))
def test_window_quantile_is_the_percentile_of_its_last_samples(values: list[float], size: int,
                                                              q: float) -> None:
    w = Window(size)
    assert w.quantile(q) is None
    for i, v in enumerate(values):
        w.add(v)  # read after every add: a stale sorted copy would show
        assert w.quantile(q) == reference(values[:i + 1][-size:], q)
    assert len(w) == min(size, len(values))
