"""The breaker in front of Redis: fast failures while open, one trial per cooldown."""

from __future__ import annotations

import pytest

from fairgate.state import Breaker


class StepClock:
    def __init__(self) -> None:
        self.now = 100.0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now


def test_it_opens_after_threshold_consecutive_failures_only() -> None:
    breaker = Breaker.fixed(threshold=3, cooldown=5.0, clock=StepClock().monotonic)
    breaker.failure()
    breaker.failure()
    breaker.success()  # the streak is broken
    breaker.failure()
    breaker.failure()
    assert breaker.state == "closed" and breaker.allow()
    breaker.failure()
    assert breaker.state == "open" and not breaker.allow()


def test_one_trial_per_cooldown_and_a_success_closes_it() -> None:
    clock = StepClock()
    breaker = Breaker.fixed(threshold=1, cooldown=5.0, clock=clock.monotonic)
    breaker.failure()
    clock.now += 4.9
    assert not breaker.allow()
    clock.now += 0.2
    assert breaker.allow()  # the trial
    assert not breaker.allow()  # everyone else waits for it
    breaker.failure()
    clock.now += 4.0
    assert not breaker.allow()
    clock.now += 1.1
    assert breaker.allow()
    breaker.success()
    assert breaker.state == "closed" and breaker.allow() and breaker.allow()


def test_a_trial_that_never_reports_does_not_wedge_it_open() -> None:
    clock = StepClock()
    breaker = Breaker.fixed(threshold=1, cooldown=1.0, clock=clock.monotonic)
    breaker.failure()
    clock.now += 1.0
    assert breaker.allow()  # a trial that is then cancelled and says nothing
    clock.now += 1.0
    assert breaker.allow()


@pytest.mark.parametrize(("threshold", "cooldown"), [(0, 1.0), (1, 0.0)])
def test_nonsense_settings_are_refused(threshold: int, cooldown: float) -> None:
    with pytest.raises(ValueError):
        Breaker.fixed(threshold=threshold, cooldown=cooldown)
