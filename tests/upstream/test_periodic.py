"""The background loop survives failing steps and stops cleanly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

import fairgate.upstream
from fairgate.upstream import PeriodicTask


async def _until(predicate: Callable[[], bool], limit: float = 10.0) -> None:
    for _ in range(int(limit / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)


async def test_a_failing_step_is_logged_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("engine list unavailable")

    task = PeriodicTask("test-loop", 0.01, step)
    task.start()
    try:
        await _until(lambda: calls >= 3)
        assert calls >= 3
        assert task.running
    finally:
        await task.stop()
    assert not task.running
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("step failed" in message for message in errors)
    stopped_at = calls
    await asyncio.sleep(0.1)
    assert calls == stopped_at


async def test_stop_cancels_a_step_in_progress() -> None:
    started = asyncio.Event()

    async def step() -> None:
        started.set()
        await asyncio.sleep(3600)

    task = PeriodicTask("test-slow", 60.0, step)
    task.start()
    await asyncio.wait_for(started.wait(), 10.0)
    await asyncio.wait_for(task.stop(), 10.0)
    assert not task.running


def test_interval_must_be_positive() -> None:
    async def step() -> None:
        return None

    with pytest.raises(ValueError):
        PeriodicTask("x", 0.0, step)


def test_exported_names() -> None:
    assert set(fairgate.upstream.__all__) >= {
        "Breaker",
        "HealthChecker",
        "MetricsScraper",
        "Replica",
        "ReplicaRegistry",
        "UpstreamSessions",
    }
    for name in fairgate.upstream.__all__:
        assert hasattr(fairgate.upstream, name), name
