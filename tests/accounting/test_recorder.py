"""The recorder against a real store (SQLite and PostgreSQL): batches, losses counted, drain."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url

from accounting.samples import hold_write_lock, record, stored_count
from fairgate.accounting import Recorder, StoreUsageWriter, UsageRecord
from fairgate.core.errors import StoreUnavailable
from fairgate.store import Store, upgrade

DEADLINE = 30.0  # seconds: generous bound for anything that waits on the store


async def eventually_stored(store: Store, expected: int) -> int:
    """Poll until the store holds ``expected`` records or the deadline passes."""
    end = time.monotonic() + DEADLINE
    count = await stored_count(store)
    while count < expected and time.monotonic() < end:
        await asyncio.sleep(0.05)
        count = await stored_count(store)
    return count


class Counts:
    """Collects what a callback receives."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, count: int) -> None:
        self.calls.append(count)


async def test_batches_are_written_one_transaction_each(store: Store) -> None:
    commits: list[int] = []
    event.listen(store.engine.sync_engine, "commit", lambda _conn: commits.append(1))
    written = Counts()
    recorder = Recorder(StoreUsageWriter(store), batch_size=500, on_written=written)
    for _ in range(1200):
        assert recorder.record(record()) is True
    assert await recorder.drain(timeout=DEADLINE) is True
    assert written.calls == [500, 500, 200]
    assert len(commits) == 3
    assert await stored_count(store) == 1200
    assert recorder.stats.written == 1200 and recorder.stats.queued == 0


async def test_a_full_batch_is_written_at_once_and_a_partial_one_waits_for_the_interval(
    store: Store,
) -> None:
    recorder = Recorder(StoreUsageWriter(store), batch_size=50, flush_interval=3600)
    recorder.start()
    for _ in range(50):
        recorder.record(record())
    assert await eventually_stored(store, 50) == 50
    for _ in range(10):
        recorder.record(record())
    await asyncio.sleep(0.3)
    assert await stored_count(store) == 50  # ten records wait for the hour, or the drain
    assert await recorder.drain(timeout=DEADLINE) is True
    assert await stored_count(store) == 60


async def test_a_partial_batch_is_written_after_the_flush_interval(store: Store) -> None:
    recorder = Recorder(StoreUsageWriter(store), batch_size=500, flush_interval=0.1)
    recorder.start()
    for _ in range(7):
        recorder.record(record())
    assert await eventually_stored(store, 7) == 7
    await recorder.drain(timeout=DEADLINE)


class LostAnswer:
    """The real writer, except that its first answer is lost after the commit."""

    def __init__(self, store: Store) -> None:
        self.real = StoreUsageWriter(store)
        self.calls = 0

    async def write(self, batch: Sequence[UsageRecord]) -> int:
        self.calls += 1
        added = await self.real.write(batch)
        if self.calls == 1:
            raise StoreUnavailable("the connection broke before the commit was acknowledged")
        return added


async def test_a_retried_batch_never_counts_a_request_twice(store: Store) -> None:
    writer = LostAnswer(store)
    recorder = Recorder(writer, batch_size=100, retry_delay=0.01)
    batch = [record(cost_micro=5) for _ in range(40)]
    for rec in batch:
        recorder.record(rec)
    assert await recorder.drain(timeout=DEADLINE) is True
    assert writer.calls == 2
    assert await stored_count(store) == 40
    stats = recorder.stats
    assert (stats.retries, stats.written, stats.duplicates, stats.failed) == (1, 40, 40, 0)
    # Writing the very same records again stores nothing more.
    assert await StoreUsageWriter(store).write(batch) == 0
    assert await stored_count(store) == 40


async def _sqlite_threads_ended() -> None:
    # A failed aiosqlite connect stops its worker thread without waiting for it; let
    # the thread hand its last answer to this event loop before the loop closes.
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end and any(
        "_connection_worker_thread" in t.name for t in threading.enumerate()
    ):
        await asyncio.sleep(0.01)


@pytest.fixture
async def gone_store(store_url: str, tmp_path: Path) -> AsyncIterator[Store]:
    """A store whose database is gone: a missing SQLite directory, a dropped PG database."""
    if store_url.startswith("sqlite"):
        gone = Store(f"sqlite:///{tmp_path}/no-such-directory/fairgate.db", timeout=2)
        with contextlib.suppress(StoreUnavailable):
            await gone.connect()
        yield gone
        await gone.close()
        await _sqlite_threads_ended()
        return
    name = f"fairgate_gone_{secrets.token_hex(4)}"
    admin = make_url(store_url).set(drivername="postgresql")
    conn = await asyncpg.connect(admin.render_as_string(hide_password=False), timeout=10)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        gone = Store(admin.set(database=name).render_as_string(hide_password=False), timeout=2)
        await gone.connect()
        await upgrade(gone)
        await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        yield gone
        await gone.close()
    finally:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.close()


async def test_a_failing_store_loses_batches_counted_and_logged_and_recording_goes_on(
    gone_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    failed = Counts()
    recorder = Recorder(
        StoreUsageWriter(gone_store),
        batch_size=10,
        flush_interval=0.05,
        retry_delay=0.01,
        on_failed=failed,
    )
    recorder.start()
    with caplog.at_level(logging.WARNING, logger="fairgate.accounting"):
        assert all(recorder.record(record()) for _ in range(30))
        end = time.monotonic() + DEADLINE
        while recorder.stats.failed < 30 and time.monotonic() < end:
            await asyncio.sleep(0.05)
        assert recorder.stats.failed == 30
        assert recorder.record(record()) is True  # serving goes on: still accepted
        assert await recorder.drain(timeout=DEADLINE) is False
    stats = recorder.stats
    assert (stats.failed, stats.retries, stats.written) == (31, 4, 0)
    assert sum(failed.calls) == 31
    lost = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert lost and all("records lost" in r.getMessage() for r in lost)
    assert any("retrying once" in r.getMessage() for r in caplog.records)


async def test_a_full_queue_drops_and_counts_while_record_returns_at_once(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    dropped = Counts()
    recorder = Recorder(
        StoreUsageWriter(store),
        capacity=100,
        batch_size=10,
        flush_interval=0.01,
        on_dropped=dropped,
    )
    recorder.start()
    accepted = 0
    spent = 0.0
    with caplog.at_level(logging.ERROR, logger="fairgate.accounting"):
        async with hold_write_lock(store):  # the writer takes one batch, then stalls
            for _ in range(20):
                began = time.perf_counter()
                accepted += sum(recorder.record(record()) for _ in range(50))
                spent += time.perf_counter() - began
                await asyncio.sleep(0.03)
            stalled = await stored_count(store)
        assert await recorder.drain(timeout=DEADLINE) is True
    assert stalled == 0
    assert accepted == 110  # the queue's 100, and the batch in the stalled writer's hands
    assert recorder.stats.dropped == 1000 - accepted == sum(dropped.calls)
    assert await stored_count(store) == accepted
    assert spent < 1.0  # 1,000 calls while the store stalled: no call waited for it
    assert any("dropped" in r.getMessage() for r in caplog.records)


async def test_drain_writes_everything_queued_then_refuses_and_counts_late_records(
    store: Store,
) -> None:
    recorder = Recorder(StoreUsageWriter(store), batch_size=500, flush_interval=3600)
    recorder.start()
    for _ in range(1234):
        recorder.record(record())
    assert await recorder.drain(timeout=DEADLINE) is True
    assert await stored_count(store) == 1234
    assert recorder.record(record()) is False
    assert recorder.stats.dropped == 1


async def test_a_drain_that_times_out_counts_what_it_leaves_and_stores_none_of_it(
    store: Store, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A store that gives up waiting for the lock after 1 s (the default is 5 s): the
    # drain waits for the cancelled write to roll back before it returns.
    impatient = Store(store_url, timeout=1.0)
    await impatient.connect()
    recorder = Recorder(StoreUsageWriter(impatient), batch_size=10, flush_interval=0.01)
    recorder.start()
    async with hold_write_lock(store):
        for _ in range(25):
            recorder.record(record())
        with caplog.at_level(logging.ERROR, logger="fairgate.accounting"):
            assert await recorder.drain(timeout=0.5) is False
    await impatient.close()
    assert recorder.stats.dropped == 25 and recorder.stats.queued == 0
    assert any("drain timed out" in r.getMessage() for r in caplog.records)
    await asyncio.sleep(0.2)
    assert await stored_count(store) == 0


async def test_record_never_raises_even_when_a_metrics_callback_does(store: Store) -> None:
    def broken(_count: int) -> None:
        raise RuntimeError("metrics are broken")

    recorder = Recorder(StoreUsageWriter(store), capacity=1, on_dropped=broken, on_written=broken)
    assert recorder.record(record()) is True
    assert recorder.record(record()) is False
    assert await recorder.drain(timeout=DEADLINE) is True
    assert await stored_count(store) == 1


def test_the_recorder_refuses_meaningless_sizes() -> None:
    for bad in ({"capacity": 0}, {"batch_size": 0}, {"flush_interval": 0.0}):
        with pytest.raises(ValueError):
            Recorder(StoreUsageWriter.__new__(StoreUsageWriter), **bad)
