"""Usage records in the store: a request id is stored once, tags with it, sums grouped in SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from fairgate.store import Store, usage_records
from fairgate.store.tables import usage_record_tags

T0 = datetime(2025, 10, 1, tzinfo=UTC)


def row(request_id: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "request_id": request_id,
        "at": T0 + timedelta(hours=1),
        "key_id": "k1",
        "org": "A",
        "team": "a1",
        "project": None,
        "tags": (),
        "model": "m",
        "pool": "p",
        "replica": "r",
        "route": "chat",
        "status": 200,
        "outcome": "ok",
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "cached_tokens": 2,
        "cost_micro": 3,
        "estimated": False,
        "ttft_ms": 10,
        "total_ms": 20,
        "attempts": 1,
    }
    base.update(fields)
    return base


async def test_a_request_id_already_stored_is_skipped_with_its_tags(store: Store) -> None:
    first = [row("r1", tags=("a", "b")), row("r2")]
    async with store.write() as conn:
        assert await usage_records.insert_records(conn, first) == 2
    again = [row("r1", tags=("c",), cost_micro=999), row("r3", tags=("a", "a"))]
    async with store.write() as conn:
        assert await usage_records.insert_records(conn, again) == 1
    async with store.read() as conn:
        tags = sorted(tuple(r) for r in await conn.execute(select(usage_record_tags)))
        (total,) = await usage_records.spend(conn, start=T0, end=T0 + timedelta(days=1))
    assert tags == [("r1", "a"), ("r1", "b"), ("r3", "a")]
    assert (total.requests, total.cost_micro) == (3, 9)


async def test_untagged_duplicates_are_counted_and_skipped(store: Store) -> None:
    # The common batch (no tags) takes a faster path on SQLite: same contract.
    async with store.write() as conn:
        assert await usage_records.insert_records(conn, [row("r1"), row("r2")]) == 2
    async with store.write() as conn:
        again = [row("r1", cost_micro=999), row("r3")]
        assert await usage_records.insert_records(conn, again) == 1
    async with store.read() as conn:
        (total,) = await usage_records.spend(conn, start=T0, end=T0 + timedelta(days=1))
    assert (total.requests, total.cost_micro) == (3, 9)


async def test_sums_are_grouped_in_sql_and_a_record_counts_once_per_tag(store: Store) -> None:
    rows = [
        row("r1", tags=("a", "b"), cost_micro=10, estimated=True),
        row("r2", tags=("a",), cost_micro=20, team="a2"),
        row("r3", cost_micro=40, team="a2", prompt_tokens=7),
    ]
    async with store.write() as conn:
        await usage_records.insert_records(conn, rows)
    end = T0 + timedelta(days=1)
    async with store.read() as conn:
        by_team = await usage_records.spend(conn, start=T0, end=end, group_by=("team",))
        by_tag = await usage_records.spend(conn, start=T0, end=end, group_by=("tag",))
        tagged_b = await usage_records.spend(conn, start=T0, end=end, filters={"tag": "b"})
    teams = {r.groups: (r.requests, r.cost_micro, r.prompt_tokens, r.estimated) for r in by_team}
    assert teams == {("a1",): (1, 10, 10, 1), ("a2",): (2, 60, 17, 0)}
    tags = {r.groups: (r.requests, r.cost_micro) for r in by_tag}
    assert tags == {("a",): (2, 30), ("b",): (1, 10), (None,): (1, 40)}
    assert [(r.requests, r.cost_micro) for r in tagged_b] == [(1, 10)]


async def test_the_period_includes_its_start_and_excludes_its_end(store: Store) -> None:
    end = T0 + timedelta(days=1)
    rows = [
        row("start", at=T0),
        row("before", at=T0 - timedelta(microseconds=1)),
        row("end", at=end),
    ]
    async with store.write() as conn:
        await usage_records.insert_records(conn, rows)
    async with store.read() as conn:
        (total,) = await usage_records.spend(conn, start=T0, end=end)
        empty = await usage_records.spend(
            conn, start=T0, end=end, group_by=("org",), filters={"org": "nobody"}
        )
    assert total.requests == 1
    assert empty == []


async def test_totals_are_exact_integers_beyond_32_bits(store: Store) -> None:
    big = 3_000_000_000  # > 2**31: PostgreSQL sums BIGINT as NUMERIC, read back as int
    async with store.write() as conn:
        await usage_records.insert_records(
            conn, [row(f"r{i}", cost_micro=big, prompt_tokens=big) for i in range(4)]
        )
    async with store.read() as conn:
        (total,) = await usage_records.spend(conn, start=T0, end=T0 + timedelta(days=1))
    assert total.cost_micro == 4 * big and type(total.cost_micro) is int
    assert total.prompt_tokens == 4 * big
