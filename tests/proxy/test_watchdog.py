"""The watchdog: one timer for a sequence of deadlines, told apart from other cancellations."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from fairgate.proxy.watchdog import Watchdog


async def _wait(dog: Watchdog, seconds: float) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if dog.expired():
            return "expired"
        raise
    return "done"


async def test_a_passed_deadline_cancels_the_await_and_says_so() -> None:
    dog = Watchdog(period=10.0)
    dog.start(time.monotonic() + 0.05)
    assert await _wait(dog, 5.0) == "expired"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    dog.stop()


async def test_a_deadline_moved_later_lets_the_await_finish() -> None:
    dog = Watchdog(period=0.02)  # the timer fires, finds the deadline later, waits again
    dog.start(time.monotonic() + 0.02)
    dog.move(time.monotonic() + 0.3)
    assert await _wait(dog, 0.1) == "done"
    dog.stop()


async def test_an_earlier_deadline_than_the_armed_timer_is_kept() -> None:
    dog = Watchdog(period=10.0)
    dog.start(time.monotonic() + 10.0)
    dog.move(time.monotonic() + 0.05)
    assert await _wait(dog, 5.0) == "expired"
    dog.stop()


async def test_no_deadline_never_expires() -> None:
    dog = Watchdog(period=0.01)
    dog.start(time.monotonic() + 0.01)
    dog.move(math.inf)
    assert await _wait(dog, 0.05) == "done"
    dog.stop()


async def test_it_watches_again_after_an_expiry() -> None:
    dog = Watchdog(period=10.0)
    dog.start(time.monotonic() + 0.02)
    assert await _wait(dog, 5.0) == "expired"
    dog.move(time.monotonic() + 0.02)
    assert await _wait(dog, 5.0) == "expired"
    dog.stop()


async def test_a_later_deadline_arms_no_new_timer() -> None:
    dog = Watchdog(period=1.0)
    dog.start(time.monotonic() + 5.0)
    armed = dog._handle
    for _ in range(100):
        dog.move(time.monotonic() + 5.0)
    assert dog._handle is armed
    dog.stop()


async def test_another_cancellation_is_not_taken_for_the_deadline() -> None:
    dog = Watchdog(period=10.0)
    dog.start(time.monotonic() + 10.0)
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().call_later(0.02, task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await _wait(dog, 5.0)
    task.uncancel()
    dog.stop()


async def test_a_cancellation_beside_the_deadline_is_passed_on() -> None:
    dog = Watchdog(period=10.0)
    dog.start(time.monotonic() + 0.02)
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    loop.call_later(0.03, task.cancel)  # both before the task resumes
    with pytest.raises(asyncio.CancelledError):
        try:
            time.sleep(0.05)  # both fire while the loop is blocked, then the task wakes once
            await asyncio.sleep(5.0)
        except asyncio.CancelledError:
            assert not dog.expired()
            raise
    task.uncancel()
    dog.stop()


async def test_a_stopped_watchdog_cancels_nothing() -> None:
    dog = Watchdog(period=10.0)
    dog.start(time.monotonic() + 0.02)
    dog.stop()
    assert await _wait(dog, 0.05) == "done"
