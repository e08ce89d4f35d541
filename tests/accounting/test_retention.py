"""Pruning past ``accounting.retention`` on a real store: old records and their tags go, in
batches; newer ones stay whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select

from accounting.samples import record, stored_count
from fairgate.accounting import StoreUsageWriter
from fairgate.accounting.retention import Pruner
from fairgate.store import Store
from fairgate.store.tables import usage_record_tags
from store.backends import FakeClock

NOW = datetime(2026, 3, 1, tzinfo=UTC)
DAY = 86400.0


async def tag_count(store: Store) -> int:
    async with store.read() as conn:
        query = select(func.count()).select_from(usage_record_tags)
        return int((await conn.execute(query)).scalar_one())


async def test_records_past_the_retention_are_pruned_with_their_tags(store: Store) -> None:
    old = [record(at=NOW - timedelta(days=91, minutes=i), tags=("a", "b")) for i in range(25)]
    kept = [record(at=NOW - timedelta(days=89, minutes=i), tags=("a",)) for i in range(5)]
    await StoreUsageWriter(store).write([*old, *kept])
    pruner = Pruner(store, retention=90 * DAY, clock=FakeClock(NOW.timestamp()), batch=7)
    assert await pruner.prune() == 25
    assert await stored_count(store) == 5
    assert await tag_count(store) == 5  # the kept records' tags, none of the pruned ones'
    assert await pruner.prune() == 0
