"""The usage recorder: a bounded in-memory queue, written to the store in batches by one task.

    recorder = Recorder(StoreUsageWriter(store), on_dropped=m.dropped.inc, …)
    recorder.start()                      # in the Gateway's start(), on its event loop
    recorder.record(usage_record)         # settle stage: never blocks, never raises
    await recorder.drain(timeout=10)      # at shutdown, after the last request settled

Losing accounting is bad; turning a stalled database into an outage is worse.
So ``record()`` only appends to a queue: when it holds ``capacity`` records,
a record is dropped and counted — which one is decided per tenant
(``fairgate.accounting.queue``), so that one tenant's flood of refusals never
costs another tenant's record, and no refusal ever costs a served request's.
One task writes whatever is queued every ``flush_interval`` seconds, or as
soon as ``batch_size`` records wait, each batch in one transaction. A batch
that fails is retried once, then dropped and counted; serving goes on either
way. What a process killed with SIGKILL loses is what sat in the queue (at
most ``capacity`` records, usually about one ``flush_interval`` of traffic);
the store itself is never left half written, since a batch commits whole or
not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fairgate.accounting.queue import TenantQueue
from fairgate.accounting.record import UsageRecord

__all__ = ["Recorder", "RecorderStats", "UsageWriter"]

log = logging.getLogger("fairgate.accounting")

_LOG_EVERY = 10.0  # seconds between two error lines about dropped records


class UsageWriter(Protocol):
    """Stores one batch of records in one transaction.

    Returns how many records were new (a record whose ``request_id`` is already
    stored is skipped, so writing a batch twice stores it once). Raises on
    failure, having stored nothing of the batch.
    """

    async def write(self, batch: Sequence[UsageRecord]) -> int: ...


@dataclass(frozen=True, slots=True)
class RecorderStats:
    """Counters since the recorder was built (records, not batches, except ``retries``).

    ``written``: in the store now; ``duplicates``: of those, already there before the
    attempt that succeeded (a retry after a commit whose answer was lost);
    ``dropped``: refused by ``record()`` (queue full, or after ``drain``) or left
    when ``drain`` timed out; ``failed``: in batches that failed twice;
    ``retries``: batches written a second time; ``queued``: waiting now.
    """

    queued: int
    written: int
    duplicates: int
    dropped: int
    failed: int
    retries: int


def _ignore(_count: int) -> None:
    return None


class Recorder:
    """Queues usage records and writes them in batches through a :class:`UsageWriter`.

    ``capacity`` (≥ 1) bounds the queue; ``batch_size`` (≥ 1) bounds one write;
    ``flush_interval`` (seconds, > 0) is the longest a record waits while the
    store answers; ``write_timeout`` (seconds) bounds one write attempt and
    ``retry_delay`` (seconds) the pause before the retry. The callbacks receive
    record counts (for metrics) and must not raise; one that does is ignored.
    """

    def __init__(
        self,
        writer: UsageWriter,
        *,
        capacity: int = 10_000,
        batch_size: int = 500,
        flush_interval: float = 1.0,
        write_timeout: float = 30.0,
        retry_delay: float = 0.5,
        on_dropped: Callable[[int], None] | None = None,
        on_written: Callable[[int], None] | None = None,
        on_failed: Callable[[int], None] | None = None,
    ) -> None:
        if capacity < 1 or batch_size < 1 or flush_interval <= 0:
            raise ValueError("capacity and batch_size must be >= 1, flush_interval > 0")
        self._writer = writer
        self._batch_size = batch_size
        self._interval = flush_interval
        self._write_timeout = write_timeout
        self._retry_delay = retry_delay
        self._on_dropped = on_dropped or _ignore
        self._on_written = on_written or _ignore
        self._on_failed = on_failed or _ignore
        self._queue = TenantQueue(capacity)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._closed = False
        self._in_hand = 0  # records of the batch being written
        self._written = self._duplicates = self._dropped = self._failed = self._retries = 0
        self._unlogged_drops = 0
        self._last_drop_log = float("-inf")

    # -- the hot path ---------------------------------------------------------------

    def record(self, rec: UsageRecord) -> bool:
        """Queue ``rec``; False when it was dropped (queue full, or the recorder drained).

        On a full queue the record may instead take the place of another tenant's
        (``TenantQueue``): True then, and the displaced record is counted as dropped.
        Never blocks and never raises: it appends to a queue and may wake the writer.
        """
        try:
            if self._closed:
                self._drop(1, "after the drain")
                return False
            dropped = self._queue.push(rec)
            if dropped is not None:
                self._drop(1, "the accounting queue is full")
                return dropped is not rec
            if len(self._queue) >= self._batch_size and self._wake is not None:
                self._wake.set()
            return True
        except Exception:  # never let accounting break a request
            log.exception("accounting: a record could not be queued")
            return False

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> None:
        """Start the writing task on the running event loop (idempotent)."""
        if self._task is None and not self._closing:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="fairgate-accounting")

    # The timeout is a parameter, not the caller's asyncio.timeout(): on expiry the
    # drain must cancel its own writer and count what was left, not be cancelled.
    async def drain(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Write everything queued, then stop; True when all of it reached the store.

        Call it once, at shutdown, after the last request has settled: later
        records are dropped and counted. When ``timeout`` (seconds) passes first,
        what is left is dropped, counted and logged; a write in progress is
        cancelled and rolled back before this returns, which can take up to the
        store's own timeout more.
        """
        self._closing = True
        failed_before = self._failed
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        task = self._task or asyncio.create_task(self._run(), name="fairgate-accounting")
        self._task = task
        done, _ = await asyncio.wait({task}, timeout=timeout)
        self._closed = True
        if self._unlogged_drops:
            log.error("accounting: %d records dropped in all", self._dropped)
            self._unlogged_drops = 0
        if not done:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            left = len(self._queue) + self._in_hand
            self._queue.clear()
            self._in_hand = 0
            log.error("accounting: drain timed out after %.1fs; %d records lost", timeout, left)
            self._drop(left, "the drain timed out", log_now=False)
            return False
        return not self._queue and self._failed == failed_before

    @property
    def stats(self) -> RecorderStats:
        return RecorderStats(
            queued=len(self._queue),
            written=self._written,
            duplicates=self._duplicates,
            dropped=self._dropped,
            failed=self._failed,
            retries=self._retries,
        )

    # -- the writing task -----------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while self._queue or not self._closing:
            if len(self._queue) < self._batch_size and not self._closing:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._interval)
            if self._queue:
                batch = self._queue.take(self._batch_size)
                await self._write(batch)

    async def _write(self, batch: list[UsageRecord]) -> None:
        # ``_in_hand`` stays set if the drain cancels this write, so that it counts the batch.
        self._in_hand = len(batch)
        for attempt in (1, 2):
            try:
                async with asyncio.timeout(self._write_timeout):
                    added = await self._writer.write(batch)
            except Exception as exc:
                if attempt == 1:
                    log.warning(
                        "accounting: writing %d records failed (%s); retrying once",
                        len(batch),
                        _reason(exc),
                    )
                    self._retries += 1
                    await asyncio.sleep(self._retry_delay)
                    continue
                log.error(
                    "accounting: %d records lost: the store failed twice (%s)",
                    len(batch),
                    _reason(exc),
                )
                self._failed += len(batch)
                self._call(self._on_failed, len(batch))
            else:
                # Every record of the batch is stored now; those the store already
                # had were written by an attempt whose answer got lost.
                self._written += len(batch)
                self._duplicates += len(batch) - added
                self._call(self._on_written, len(batch))
            break
        self._in_hand = 0

    # -- counting losses ------------------------------------------------------------

    def _drop(self, count: int, why: str, *, log_now: bool = True) -> None:
        if count <= 0:
            return
        self._dropped += count
        self._call(self._on_dropped, count)
        if not log_now:
            return
        self._unlogged_drops += count
        now = time.monotonic()
        if now - self._last_drop_log >= _LOG_EVERY:
            log.error("accounting: %d records dropped (%s)", self._unlogged_drops, why)
            self._unlogged_drops = 0
            self._last_drop_log = now

    @staticmethod
    def _call(callback: Callable[[int], None], count: int) -> None:
        try:
            callback(count)
        except Exception:
            log.exception("accounting: a metrics callback failed")


def _reason(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
