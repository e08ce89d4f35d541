"""The sliding window's guarantee, checked on arbitrary arrivals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.limits import SlidingWindow
from fairgate.limits.window import bucket_of


def admit(window: SlidingWindow, weight: int, limit: int, now: float) -> bool:
    if window.usage(now) + weight > limit:
        return False
    window.prune(now)
    window.add(window.bucket(now), weight)
    return True


arrivals = st.lists(
    st.tuples(st.floats(min_value=0, max_value=600, allow_nan=False), st.integers(1, 40)),
    min_size=1,
    max_size=200,
)


@settings(max_examples=150, deadline=None)
@given(
    arrivals=arrivals,
    limit=st.integers(1, 100),
    length=st.sampled_from([1.0, 10.0, 60.0, 86400.0]),
    granules=st.integers(1, 60),
)
def test_no_window_of_the_configured_length_holds_more_than_the_limit(
    arrivals: list[tuple[float, int]], limit: int, length: float, granules: int
) -> None:
    window = SlidingWindow(length, granules)
    taken: list[tuple[float, int]] = []
    for now, weight in sorted(arrivals):
        if admit(window, weight, limit, now):
            taken.append((now, weight))
    for start, _ in taken:  # the heaviest closed interval starts at an admission
        assert sum(w for t, w in taken if start <= t <= start + length) <= limit


@settings(max_examples=150, deadline=None)
@given(arrivals=arrivals, limit=st.integers(1, 100), weight=st.integers(1, 100))
def test_retry_after_is_when_the_weight_fits_and_not_a_granule_sooner(
    arrivals: list[tuple[float, int]], limit: int, weight: int
) -> None:
    window = SlidingWindow(60.0, 60)
    for now, w in sorted(arrivals):
        admit(window, w, limit, now)
    now = max(t for t, _ in arrivals)
    wait = window.retry_after(weight, limit, now)
    if weight > limit:
        assert wait == 60.0
        return
    assert window.usage(now + wait) + weight <= limit
    if wait >= 1.0:
        assert window.usage(now + wait - 1.0) + weight > limit


def test_the_worked_example() -> None:
    window = SlidingWindow(length=60, granules=60)
    window.add(window.bucket(59.5), 10)
    assert window.usage(60.5) == 10
    assert window.retry_after(1, 10, 60.5) == 59.5
    assert window.usage(119.99) == 10
    assert window.usage(120.0) == 0


def test_a_burst_on_both_sides_of_a_minute_passes_once() -> None:
    window = SlidingWindow(60.0, 60)
    first = sum(admit(window, 1, 10, 59.9) for _ in range(10))
    second = sum(admit(window, 1, 10, 60.1) for _ in range(10))
    assert (first, second) == (10, 0)


def test_refunds_never_go_below_zero_and_empty_buckets_vanish() -> None:
    window = SlidingWindow(60.0, 60)
    window.add(5, 3)
    assert window.add(5, -10) == 0
    assert window.buckets == {}


def test_prune_keeps_only_countable_buckets() -> None:
    window = SlidingWindow(60.0, 60)
    for t in (0.0, 30.0, 61.0, 90.0):
        window.add(window.bucket(t), 1)
    window.prune(90.0)
    assert sorted(window.buckets) == [30, 61, 90]
    assert window.usage(90.0) == 3
    window.prune(91.0)
    assert sorted(window.buckets) == [61, 90]


def test_bucket_of_cuts_the_window_into_granules() -> None:
    assert bucket_of(59.99, 60.0, 60) == 59
    assert bucket_of(60.0, 60.0, 60) == 60
    assert bucket_of(60.0, 60.0, 6) == 6
