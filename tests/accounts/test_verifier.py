"""The bounded verifier pool: at most threads + queue hashes; past that, VerifierBusy at once."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from fairgate.accounts import Passwords, Verdict, Verifier, VerifierBusy

REAL = Passwords(memory_kib=19456, iterations=2, parallelism=1)


class GatedPasswords:
    """The real argon2id, each call held until the test opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)

    def hash(self, password: str) -> str:
        self.started.release()
        self.gate.wait(10)
        return REAL.hash(password)

    def verify(self, stored: str | None, password: str) -> Verdict:
        self.started.release()
        self.gate.wait(10)
        return REAL.verify(stored, password)


async def test_past_threads_plus_queue_a_verification_is_refused_at_once() -> None:
    gated = GatedPasswords()
    verifier = Verifier(gated, threads=1, queue=1)
    try:
        running = [asyncio.ensure_future(verifier.verify(None, "x" * 12)) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert verifier.pending == 2
        with pytest.raises(VerifierBusy):
            await verifier.verify(None, "x" * 12)
        with pytest.raises(VerifierBusy):
            await verifier.hash("x" * 12)
        gated.gate.set()
        assert [v.ok for v in await asyncio.gather(*running)] == [False, False]
        assert verifier.pending == 0
        assert verifier.verifications == 2
        assert (await verifier.verify(await verifier.hash("y" * 12), "y" * 12)).ok
    finally:
        gated.gate.set()
        verifier.close()


async def test_a_caller_that_goes_away_does_not_free_the_thread_it_occupies() -> None:
    gated = GatedPasswords()
    verifier = Verifier(gated, threads=1, queue=0)
    try:
        waiting = asyncio.ensure_future(verifier.verify(None, "x" * 12))
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.sleep(0.01)
        with pytest.raises(VerifierBusy):  # the hash still runs: its slot is still taken
            await verifier.verify(None, "x" * 12)
        gated.gate.set()
        for _ in range(100):
            if verifier.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert verifier.pending == 0
    finally:
        gated.gate.set()
        verifier.close()


async def test_hashing_runs_off_the_event_loop() -> None:
    verifier = Verifier(REAL, threads=2, queue=8)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticker = asyncio.ensure_future(tick())
    try:
        await asyncio.gather(*(verifier.verify(None, "x" * 12) for _ in range(8)))
    finally:
        ticker.cancel()
        verifier.close()
    assert ticks > 20  # the loop kept turning while eight argon2 hashes ran


class PriorityPasswords:
    """Records the CPU priority of the thread each hash runs on."""

    def __init__(self) -> None:
        self.priorities: list[int] = []

    def hash(self, password: str) -> str:
        self.priorities.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return REAL.hash(password)

    def verify(self, stored: str | None, password: str) -> Verdict:
        return REAL.verify(stored, password)


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux's")
async def test_hashing_threads_run_at_the_lowest_priority_and_the_loop_does_not() -> None:
    recorded = PriorityPasswords()
    verifier = Verifier(recorded, threads=2, queue=0)
    try:
        await verifier.hash("x" * 12)
    finally:
        verifier.close()
    assert recorded.priorities == [19]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < 19
