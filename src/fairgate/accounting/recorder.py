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
way. Without a journal, what a process killed with SIGKILL loses is what sat in the queue (at
most ``capacity`` records, usually about one ``flush_interval`` of traffic);
the store itself is never left half written, since a batch commits whole or
not at all.

With a :class:`~fairgate.accounting.journal.Journal`, each record is also
appended to a local file as ``record()`` queues it, and a SIGKILL loses none
of them: the next start reads the dead process's journal back into the store.
The journal is also where records go when the queue is full or a batch fails
twice: they **spill** (kept in the file, read back once the store answers)
instead of being dropped, up to the journal's bound; only a record that is
neither journaled nor kept in memory is lost, dropped and counted.

Write-ahead entries (``intend``, ``retire``) stand for the requests in flight: a process
that adopts a dead one's segments turns the entries no record follows into records
(``journal.unmatched``), journaled in its own segment and written like spilled ones, so
a request cut off by a kill is charged its reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fairgate.accounting.journal import Journal, Segment, unmatched
from fairgate.accounting.queue import TenantQueue
from fairgate.accounting.record import UsageRecord

__all__ = ["Recorder", "RecorderStats", "UsageWriter"]

log = logging.getLogger("fairgate.accounting")

_LOG_EVERY = 10.0  # seconds between two error lines about dropped records
_ADOPT_EVERY = 30.0  # seconds between two looks for journal segments of dead processes


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
    ``retries``: batches written a second time; ``queued``: waiting now;
    ``spilled``: left memory unwritten but kept in the journal (not lost);
    ``replayed``: read back from the journal and written (stored or found there).
    """

    queued: int
    written: int
    duplicates: int
    dropped: int
    failed: int
    retries: int
    spilled: int = 0
    replayed: int = 0


def _ignore(_count: int) -> None:
    return None


class Recorder:
    """Queues usage records and writes them in batches through a :class:`UsageWriter`.

    ``capacity`` (≥ 1) bounds the queue; ``batch_size`` (≥ 1) bounds one write;
    ``flush_interval`` (seconds, > 0) is the longest a record waits while the
    store answers; ``write_timeout`` (seconds) bounds one write attempt and
    ``retry_delay`` (seconds) the pause before the retry. The callbacks receive
    record counts (for metrics) and must not raise; one that does is ignored.
    ``journal`` (opened by :meth:`open` or :meth:`start`) makes records outlive
    the process and is the spill past the queue (module docstring).
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
        on_spilled: Callable[[int], None] | None = None,
        journal: Journal | None = None,
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
        self._on_spilled = on_spilled or _ignore
        self._journal = journal
        self._opened = False
        self._replayed_journal = False
        self._segment_of: dict[int, int] = {}  # id(record) → journal segment, while queued
        self._hand: list[int | None] = []  # the segments of the batch being written
        self._spilled = self._replayed = 0
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
            if self._journal is not None:
                seq = self._journal.append(rec)
                if seq is not None:
                    self._segment_of[id(rec)] = seq
            dropped = self._queue.push(rec)
            if dropped is not None:
                kept = self._spill_or_drop(dropped, "the accounting queue is full")
                return kept or dropped is not rec
            if len(self._queue) >= self._batch_size and self._wake is not None:
                self._wake.set()
            return True
        except Exception:  # never let accounting break a request
            log.exception("accounting: a record could not be queued")
            return False

    def intend(self, entry: Sequence[object], previous: int | None = None) -> int | None:
        """Journal the write-ahead entry ``entry`` (``journal.ENTRY_FIELDS``) and retire
        ``previous`` (the same request's earlier one); the entry's segment, or None (no
        journal). When ``entry`` cannot be written (the bound, a failed write),
        ``previous`` stays and is returned: an earlier entry still stands for the request.
        Never raises."""
        journal = self._journal
        if journal is None:
            return None
        try:
            seq = journal.intend(entry)
            if seq is None:
                return previous
            if previous is not None:
                journal.retire(previous)
            return seq
        except Exception:  # never let accounting break a request
            log.exception("accounting: a write-ahead entry could not be journaled")
            return previous

    def retire(self, seq: int) -> None:
        """The write-ahead entry in segment ``seq`` is superseded by its request's record
        (queued by ``record``). Never raises."""
        if self._journal is not None:
            try:
                self._journal.retire(seq)
            except Exception:
                log.exception("accounting: a write-ahead entry could not be retired")

    # -- life cycle -----------------------------------------------------------------

    async def open(self) -> int:
        """Open the journal and write what earlier processes left in it to the store, before
        serving (so that restored budgets see it); returns how many records were read back.
        A store that fails leaves them to the writing task. Raises ``OSError`` when the
        journal's directory cannot be used."""
        if self._journal is None or self._replayed_journal:
            return 0
        self.open_journal()
        self._replayed_journal = True
        await self._charge_interrupted()
        replayed = 0
        while (segment := self._journal.next_spilled()) is not None:
            count = await self._replay(segment)
            if count is None:
                break
            replayed += count
        return replayed

    def open_journal(self) -> None:
        """Open the journal (create its directory, take its first segment), once; nothing
        without one. Raises ``OSError`` when the directory cannot be created or written,
        before anything else is opened, so that the gateway can refuse to start."""
        if self._journal is not None and not self._opened:
            self._journal.open()
            self._opened = True

    def start(self) -> None:
        """Start the writing task on the running event loop (idempotent); opens the journal
        when :meth:`open` did not (the writing task then reads back what it adopted)."""
        self.open_journal()
        self._replayed_journal = True
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
            hand, self._hand = self._hand, []
            left = self._in_hand - sum(1 for seq in hand if seq is not None)
            self._spill_segments(seq for seq in hand if seq is not None)
            for rec in self._queue.take(len(self._queue)):
                left += 0 if self._spill_or_drop(rec, "", count_drop=False) else 1
            self._in_hand = 0
            self._close_journal()
            log.error(
                "accounting: drain timed out after %.1fs; %d records lost%s",
                timeout,
                left,
                " (the others stay in the journal for the next start)" if self._journal else "",
            )
            self._drop(left, "the drain timed out", log_now=False)
            return False
        spilled = self._journal is not None and self._journal.spilled > 0
        self._close_journal()  # what is still spilled stays on disk for the next start
        return not self._queue and self._failed == failed_before and not spilled

    @property
    def stats(self) -> RecorderStats:
        return RecorderStats(
            queued=len(self._queue),
            written=self._written,
            duplicates=self._duplicates,
            dropped=self._dropped,
            failed=self._failed,
            retries=self._retries,
            spilled=self._spilled,
            replayed=self._replayed,
        )

    # -- the writing task -----------------------------------------------------------

    async def _run(self) -> None:
        assert self._wake is not None
        wake = self._wake
        replay_failed = False
        next_adopt = time.monotonic() + _ADOPT_EVERY
        await self._charge_interrupted()  # what the journal adopted when it was opened
        while True:
            if len(self._queue) < self._batch_size and not self._closing:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self._interval)
            if self._queue:
                batch = self._queue.take(self._batch_size)
                await self._write(batch)
                continue
            # The queue is empty: the store keeps up. Read back what spilled, one segment
            # per turn; after a failure, try again next interval (or give up when closing).
            segment = self._journal.next_spilled() if self._journal is not None else None
            if segment is not None and not (self._closing and replay_failed):
                replay_failed = await self._replay(segment) is None
                continue
            if self._closing:
                return
            if self._journal is not None and time.monotonic() >= next_adopt:
                # segments of a process (a worker) that died since this one started
                next_adopt = time.monotonic() + _ADOPT_EVERY
                with contextlib.suppress(OSError):
                    self._journal.adopt()
                await self._charge_interrupted()

    async def _replay(self, segment: Segment) -> int | None:
        """Write every record of a spilled segment; its count, or None when the store failed
        (the segment stays, to be tried again)."""
        assert self._journal is not None
        try:
            records = await asyncio.to_thread(self._journal.read, segment)
        except OSError as exc:
            log.error("accounting: a journal segment could not be read (%s)", exc)
            self._journal.done(segment)  # unreadable now is unreadable later
            return 0
        for start in range(0, len(records), self._batch_size):
            chunk = records[start : start + self._batch_size]
            try:
                async with asyncio.timeout(self._write_timeout):
                    await self._writer.write(chunk)
            except Exception as exc:
                log.warning(
                    "accounting: %d journaled records wait for the store (%s)",
                    len(records) - start,
                    _reason(exc),
                )
                return None
        self._journal.done(segment)
        self._replayed += len(records)
        if records:
            log.info("accounting: %d journaled records written to the store", len(records))
        return len(records)

    async def _write(self, batch: list[UsageRecord]) -> None:
        # ``_in_hand`` stays set if the drain cancels this write, so that it counts the batch.
        self._in_hand = len(batch)
        self._hand = [self._segment_of.pop(id(rec), None) for rec in batch]
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
                journaled = [seq for seq in self._hand if seq is not None]
                lost = len(batch) - len(journaled)
                self._spill_segments(journaled)
                if lost:
                    log.error(
                        "accounting: %d records lost: the store failed twice (%s)",
                        lost,
                        _reason(exc),
                    )
                    self._failed += lost
                    self._call(self._on_failed, lost)
            else:
                # Every record of the batch is stored now; those the store already
                # had were written by an attempt whose answer got lost.
                self._written += len(batch)
                self._duplicates += len(batch) - added
                self._call(self._on_written, len(batch))
                if self._journal is not None:
                    for seq in self._hand:
                        if seq is not None:
                            self._journal.settle(seq)
            break
        self._in_hand = 0
        self._hand = []

    # -- the journal ----------------------------------------------------------------

    def _spill_or_drop(self, rec: UsageRecord, why: str, *, count_drop: bool = True) -> bool:
        """``rec`` leaves memory unwritten: True when the journal keeps it (spilled),
        False when it is lost (dropped and counted, unless ``count_drop`` is False)."""
        seq = self._segment_of.pop(id(rec), None)
        if seq is not None:
            self._spill_segments((seq,))
            return True
        if count_drop:
            self._drop(1, why)
        return False

    async def _charge_interrupted(self) -> None:
        """The requests that dead processes had in flight, from the write-ahead entries of
        the segments adopted since the last call that no record follows: each becomes a
        record (charged its reservation, flagged estimated), journaled in this process's
        segment and marked for read-back, so it is written like a spilled record and
        survives this process too; queued when the journal cannot take it."""
        journal = self._journal
        if journal is None:
            return
        adopted = journal.take_adopted()
        if not adopted:
            return
        try:
            interrupted = await asyncio.to_thread(unmatched, adopted)
        except OSError as exc:
            log.error(
                "accounting: the write-ahead entries of %d adopted journal segments could"
                " not be read (%s); the requests in flight they stood for are not charged",
                len(adopted),
                exc.strerror or exc,
            )
            return
        for rec in interrupted:
            seq = journal.append(rec)
            if seq is None:
                self.record(rec)
            else:
                journal.spill(seq)
        if interrupted:
            log.warning(
                "accounting: %d requests in flight when their gateway process stopped are"
                " charged their reservation",
                len(interrupted),
            )

    def _spill_segments(self, seqs: Iterable[int]) -> None:
        journal = self._journal
        count = 0
        for seq in seqs:
            if journal is not None:
                journal.spill(seq)
                count += 1
        if count:
            self._spilled += count
            self._call(self._on_spilled, count)

    def _close_journal(self) -> None:
        if self._journal is not None and self._opened:
            self._journal.close()
            self._opened = False

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
