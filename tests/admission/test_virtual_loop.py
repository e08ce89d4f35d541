"""The virtual-time event loop: timers fire in order without waiting, and a stuck loop says so."""

from __future__ import annotations

import asyncio
import time

import pytest

from fairgate.admission.virtual_loop import LoopClock, run_virtual


def test_an_hour_of_timers_passes_at_once_and_in_order() -> None:
    fired: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        fired.append((name, asyncio.get_running_loop().time()))

    async def main() -> float:
        clock = LoopClock(asyncio.get_running_loop())
        await asyncio.gather(sleeper("late", 3600.0), sleeper("early", 1.5), sleeper("mid", 60.0))
        return clock.monotonic()

    started = time.monotonic()
    assert run_virtual(main()) == 3600.0
    assert time.monotonic() - started < 10.0  # an hour of virtual time, generously bounded
    assert fired == [("early", 1.5), ("mid", 60.0), ("late", 3600.0)]


def test_timeouts_use_virtual_time() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(loop.create_future(), timeout=30.0)
        return loop.time()

    assert run_virtual(main()) == 30.0


def test_a_loop_waiting_for_nothing_raises_instead_of_hanging() -> None:
    async def main() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(RuntimeError, match="virtual time is stuck"):
        run_virtual(main())
