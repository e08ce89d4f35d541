"""Usage records in the store: a request id is stored once, tags with it, sums grouped in SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from fairgate.store import Store, usage_records
from fairgate.store.tables import usage_record_costs, usage_record_tags

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


async def test_a_part_charged_to_another_model_counts_under_that_model(store: Store) -> None:
    """``dear`` timed out before ``cheap`` answered: the record (model ``cheap``) holds the
    whole charge, 1,000 of it dear's reservation. By model, dear shows its 1,000 and cheap
    the rest; the request, its tokens and its flag stay with cheap; every other sum
    counts the record once, as before."""
    rows = [
        row(
            "r1",
            model="cheap",
            pool="small",
            cost_micro=1_030,
            tags=("a",),
            other_costs=[("dear", "big", 1_000)],
            estimated=True,
        ),
        row("r2", model="dear", pool="big", cost_micro=500, tags=("a",)),
        row("r3", model="cheap", pool="small", cost_micro=40, team="a2"),
    ]
    async with store.write() as conn:
        assert await usage_records.insert_records(conn, rows) == 3
    end = T0 + timedelta(days=1)

    async def sums(**ask: Any) -> dict[tuple[str | None, ...], tuple[int, ...]]:
        async with store.read() as conn:
            got = await usage_records.spend(conn, start=T0, end=end, **ask)
        return {r.groups: (r.requests, r.cost_micro, r.prompt_tokens, r.estimated) for r in got}

    assert await sums(group_by=("model",)) == {
        ("cheap",): (2, 70, 20, 1),
        ("dear",): (1, 1_500, 10, 0),
    }
    assert await sums(group_by=("pool",)) == {
        ("small",): (2, 70, 20, 1),
        ("big",): (1, 1_500, 10, 0),
    }
    # what a per-model budget of a team is seeded from
    assert await sums(filters={"model": "dear", "team": "a1"}) == {(): (1, 1_500, 10, 0)}
    assert await sums(filters={"model": "cheap", "team": "a1"}) == {(): (1, 30, 10, 1)}
    assert await sums(group_by=("team", "model"), filters={"tag": "a"}) == {
        ("a1", "cheap"): (1, 30, 10, 1),
        ("a1", "dear"): (1, 1_500, 10, 0),
    }
    assert await sums(group_by=("model", "tag")) == {
        ("cheap", "a"): (1, 30, 10, 1),
        ("cheap", None): (1, 40, 10, 0),
        ("dear", "a"): (1, 1_500, 10, 0),
    }
    # the totals: each record once, its whole charge, no request more
    assert await sums() == {(): (3, 1_570, 30, 1)}
    assert await sums(group_by=("team",)) == {("a1",): (2, 1_530, 20, 1), ("a2",): (1, 40, 10, 0)}


async def test_a_record_written_again_keeps_one_copy_of_its_parts(store: Store) -> None:
    first = row("r1", model="cheap", cost_micro=1_030, other_costs=[("dear", None, 1_000)])
    async with store.write() as conn:
        assert await usage_records.insert_records(conn, [first]) == 1
    again = row("r1", model="cheap", cost_micro=9, other_costs=[("dear", None, 5), ("x", None, 1)])
    async with store.write() as conn:
        assert await usage_records.insert_records(conn, [again, row("r2")]) == 1
    async with store.read() as conn:
        parts = [tuple(r) for r in await conn.execute(select(usage_record_costs))]
        by_model = await usage_records.spend(
            conn, start=T0, end=T0 + timedelta(days=1), group_by=("model",)
        )
    assert parts == [("r1", "dear", None, 1_000)]
    got = {r.groups: (r.requests, r.cost_micro) for r in by_model}
    assert got == {("cheap",): (1, 30), ("dear",): (0, 1_000), ("m",): (1, 3)}


async def test_pruning_a_record_takes_its_parts_with_it(store: Store) -> None:
    rows = [
        row("old", at=T0, other_costs=[("dear", None, 2)]),
        row("new", at=T0 + timedelta(days=2), other_costs=[("dear", None, 1)]),
    ]
    async with store.write() as conn:
        await usage_records.insert_records(conn, rows)
    async with store.write() as conn:
        assert await usage_records.delete_before(conn, T0 + timedelta(days=1), 10) == 1
    async with store.read() as conn:
        parts = [tuple(r) for r in await conn.execute(select(usage_record_costs))]
    assert parts == [("new", "dear", None, 1)]
