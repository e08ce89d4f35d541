"""The step loop: one asyncio task that drives the Scheduler at the configured token rate."""

from __future__ import annotations

import asyncio
import contextlib

from fairgate.sim.config import SimConfig
from fairgate.sim.kv_cache import KVCache
from fairgate.sim.scheduler import Scheduler
from fairgate.sim.sequence import Sequence
from fairgate.sim.stats import SimStats

__all__ = ["Engine"]


class Engine:
    """Runs ``Scheduler.step`` every ``1 / tokens_per_second`` seconds while there is work.

    Contract: ``submit`` and ``abort`` take effect at once (an abort frees the
    sequence's blocks before it returns); an idle engine sleeps until the next
    ``submit``, and a submit to an idle engine is admitted on the spot rather than
    at the next tick. Steps are scheduled on absolute times; a late step is not
    made up for with a burst. ``close`` aborts everything queued or running and
    refuses later submits (``closed``); ``stop`` also ends the loop.
    """

    def __init__(self, config: SimConfig, stats: SimStats) -> None:
        self.kv = KVCache(config.kv_blocks, config.block_size, prefix_caching=config.prefix_caching)
        self.scheduler = Scheduler(
            self.kv,
            stats,
            max_num_seqs=config.max_num_seqs,
            prefill_seconds=config.ttft,
            policy=config.scheduling_policy,
        )
        self._period = 1.0 / config.tokens_per_second
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._live: set[Sequence] = set()
        self.closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    def close(self) -> None:
        self.closed = True
        for seq in list(self._live):
            self.abort(seq)

    async def stop(self) -> None:
        self.close()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def submit(self, seq: Sequence) -> None:
        if self.closed:
            raise RuntimeError("the engine is closed")
        self._live.add(seq)
        self.scheduler.add(seq)
        self._wake.set()

    def abort(self, seq: Sequence) -> None:
        self.scheduler.abort(seq)
        self._live.discard(seq)

    def forget(self, seq: Sequence) -> None:
        """Drop a finished sequence from the set ``stop`` would abort."""
        self._live.discard(seq)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        scheduler = self.scheduler
        next_at = loop.time()
        while True:
            if scheduler.idle:
                self._wake.clear()
                await self._wake.wait()
                next_at = loop.time()
            now = loop.time()
            scheduler.step(now)
            next_at += self._period
            delay = next_at - loop.time()
            if delay < 0:
                next_at = loop.time()
                delay = 0.0
            await asyncio.sleep(delay)
