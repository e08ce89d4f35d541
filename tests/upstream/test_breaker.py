"""The breaker state machine, on an injected clock."""

from __future__ import annotations

import pytest

from fairgate.upstream import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _opened(clock: Clock, **kwargs: float) -> Breaker:
    breaker = Breaker(failures=3, backoff_initial=1.0, backoff_max=8.0, clock=clock, **kwargs)
    for _ in range(3):
        breaker.failure()
    assert breaker.state == "open"
    return breaker


def test_closed_until_the_threshold_of_consecutive_failures() -> None:
    breaker = Breaker(failures=3, clock=Clock())
    breaker.failure()
    breaker.failure()
    assert not breaker.blocked()  # the clock stands still: closed
    assert breaker.allow()
    breaker.success()  # breaks the run
    breaker.failure()
    breaker.failure()
    assert not breaker.blocked()
    breaker.failure()
    assert breaker.state == "open"
    assert not breaker.allow()


def test_a_caller_counts_once_in_a_run_and_cannot_open_it_alone() -> None:
    breaker = Breaker(failures=3, clock=Clock())
    for _ in range(10):
        breaker.failure("key-a")
    assert breaker.state == "closed" and breaker.consecutive_failures == 1
    breaker.failure("key-b")
    breaker.failure("key-a")  # neither counts nor ends the run
    breaker.failure()  # a failure naming no caller (a connection error) always counts
    assert breaker.state == "open"


def test_a_success_or_an_opening_starts_the_callers_again() -> None:
    clock = Clock()
    breaker = Breaker(failures=2, backoff_initial=1.0, clock=clock)
    breaker.failure("key-a")
    breaker.success()
    breaker.failure("key-a")  # a new run: counted again
    assert breaker.consecutive_failures == 1
    breaker.failure("key-b")
    assert breaker.state == "open"
    clock.now += 1.0
    assert breaker.allow()  # the half-open probe
    breaker.success()
    breaker.failure("key-a")
    breaker.failure("key-b")
    assert breaker.state == "open"


def test_open_refuses_until_the_backoff_has_elapsed() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 0.999
    assert breaker.blocked()
    assert not breaker.allow()
    assert breaker.state == "open"
    clock.now += 0.001
    assert not breaker.blocked()
    assert breaker.state == "open"  # blocked() never changes state


def test_half_open_admits_exactly_one_probe() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 1.0
    admitted = [breaker.allow() for _ in range(5)]
    assert admitted == [True, False, False, False, False]
    assert breaker.state == "half_open"
    assert breaker.blocked()


def test_a_successful_probe_closes_and_resets_the_backoff() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 1.0
    assert breaker.allow()
    breaker.failure()  # backoff 2
    clock.now += 2.0
    assert breaker.allow()
    breaker.success()
    assert breaker.state == "closed"
    assert breaker.backoff == 1.0
    assert breaker.consecutive_failures == 0
    assert all(breaker.allow() for _ in range(3))


def test_a_failed_probe_doubles_the_backoff_up_to_the_cap() -> None:
    clock = Clock()
    breaker = _opened(clock)
    seen = []
    for _ in range(6):
        seen.append(breaker.backoff)
        clock.now += breaker.backoff - 0.01
        assert not breaker.allow()
        clock.now += 0.01
        assert breaker.allow()
        breaker.failure()
        assert breaker.state == "open"
    assert seen == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_abandon_frees_the_probe_slot() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 1.0
    assert breaker.allow()
    assert not breaker.allow()
    breaker.abandon()
    assert breaker.allow()
    assert breaker.state == "half_open"


def test_an_unreported_probe_is_given_up_after_the_probe_timeout() -> None:
    clock = Clock()
    breaker = _opened(clock, probe_timeout=30.0)
    clock.now += 1.0
    assert breaker.allow()
    clock.now += 29.0
    assert not breaker.allow()
    clock.now += 1.0
    assert breaker.allow()


def test_late_failures_while_open_do_not_extend_the_wait() -> None:
    clock = Clock()
    breaker = _opened(clock)
    clock.now += 0.5
    breaker.failure()
    breaker.failure()
    clock.now += 0.5
    assert breaker.allow()


def test_threshold_one_is_a_cool_down() -> None:
    clock = Clock()
    breaker = Breaker(failures=1, backoff_initial=5.0, backoff_max=5.0, clock=clock)
    breaker.failure()
    assert not breaker.allow()
    clock.now += 5.0
    assert breaker.allow()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failures": 0},
        {"backoff_initial": 0.0},
        {"backoff_initial": 10.0, "backoff_max": 5.0},
        {"probe_timeout": 0.0},
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Breaker(**kwargs)  # type: ignore[arg-type]
