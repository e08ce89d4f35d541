"""The store writer: what a record looks like once stored, and texts cut to their columns."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from accounting.samples import DAY0, record
from fairgate.accounting import StoreUsageWriter
from fairgate.core.errors import StoreUnavailable
from fairgate.store import Store
from fairgate.store.tables import usage_record_costs, usage_record_tags, usage_records


async def test_a_record_is_stored_field_by_field_with_its_tags(store: Store) -> None:
    rec = record(
        project="p",
        tags=("eval", "batch", "eval"),
        outcome="client_abort",
        status=499,
        estimated=True,
        cached_tokens=40,
        ttft_ms=None,
        replica="",
    )
    assert await StoreUsageWriter(store).write([rec]) == 1
    async with store.read() as conn:
        row = (await conn.execute(select(usage_records))).one()._mapping
        tags = sorted(t for (_, t) in await conn.execute(select(usage_record_tags)))
    assert row["request_id"] == rec.request_id and row["at"] == rec.at
    assert (row["org"], row["team"], row["project"], row["key_id"]) == ("A", "a1", "p", "k-1")
    assert (row["status"], row["outcome"], row["estimated"]) == (499, "client_abort", True)
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (100, 20, 40)
    assert (row["cost_micro"], row["ttft_ms"], row["total_ms"], row["replica"]) == (
        7,
        None,
        120,
        None,
    )
    assert tags == ["batch", "eval"]


async def test_over_long_names_are_cut_so_the_batch_is_not_refused(store: Store) -> None:
    long = "m" * 1000
    batch = [record(model=long, replica=long, tags=("t" * 1000,), total_ms=10**12), record()]
    assert await StoreUsageWriter(store).write(batch) == 2
    async with store.read() as conn:
        models = sorted(m for (m,) in await conn.execute(select(usage_records.c.model)))
        total_ms = max(t for (t,) in await conn.execute(select(usage_records.c.total_ms)))
    assert models == ["llama-70b", "m" * 256]
    assert total_ms == 2**31 - 1


async def test_the_parts_charged_to_other_models_are_stored_beside_their_record(
    store: Store,
) -> None:
    """Only the records with parts have rows of them; a name is cut and cleaned as the
    record's own, so one odd model name cannot make the store refuse the batch."""
    long = "d" * 300
    fell_back = record(
        model="cheap",
        cost_micro=1_500,
        other_costs=(("dear", "big", 1_000), (long + "a", None, 200), (long + "b", None, 100)),
    )
    odd = record(model="cheap", cost_micro=9, other_costs=(("de\x00ar", "b\x00ig", 5),))
    assert await StoreUsageWriter(store).write([record(), fell_back, odd]) == 3
    async with store.read() as conn:
        parts = sorted(tuple(r) for r in await conn.execute(select(usage_record_costs)))
    assert parts == sorted(
        [
            (fell_back.request_id, "d" * 256, None, 300),  # one name once cut: one part
            (fell_back.request_id, "dear", "big", 1_000),
            (odd.request_id, "dear", "big", 5),
        ]
    )


async def test_a_batch_the_store_refuses_stores_nothing_of_it(store: Store) -> None:
    good = record()
    naive = record(at=DAY0.replace(tzinfo=None) + timedelta(hours=1))  # refused by the column
    writer = StoreUsageWriter(store)
    with pytest.raises(StoreUnavailable):
        await writer.write([good, naive])
    async with store.read() as conn:
        assert (await conn.execute(select(usage_records))).all() == []
    assert await writer.write([good]) == 1


async def test_a_nul_character_cannot_make_postgresql_refuse_the_batch(store: Store) -> None:
    rec = record(model="llama\x00-70b", tags=("a\x00b",))
    assert await StoreUsageWriter(store).write([rec]) == 1
    async with store.read() as conn:
        assert (await conn.execute(select(usage_records.c.model))).scalar_one() == "llama-70b"
        assert (await conn.execute(select(usage_record_tags.c.tag))).scalar_one() == "ab"


async def test_every_field_lands_in_its_own_column(store: Store) -> None:
    # The writer lays a record out in the table's column order: a field in the wrong
    # place would land in another column (all distinct values here, so it would show).
    rec = record(
        project="p",
        pool="gpu-pool",
        replica="r-9",
        route="/v1/chat/completions",
        status=201,
        outcome="truncated",
        prompt_tokens=11,
        completion_tokens=12,
        cached_tokens=13,
        cost_micro=14,
        estimated=True,
        ttft_ms=15,
        total_ms=16,
        attempts=3,
        client_addr="10.0.0.7",
    )
    assert await StoreUsageWriter(store).write([rec]) == 1
    async with store.read() as conn:
        row = (await conn.execute(select(usage_records))).one()._mapping
    assert dict(row) == {
        name: getattr(rec, name) for name in (c.name for c in usage_records.columns)
    }


async def test_numbers_out_of_their_columns_range_are_bounded(store: Store) -> None:
    rec = record(status=-1, prompt_tokens=-5, cost_micro=-1, ttft_ms=-3, total_ms=-2, attempts=-1)
    big = record(status=1200, ttft_ms=10**12, attempts=10**12)
    assert await StoreUsageWriter(store).write([rec, big]) == 2
    async with store.read() as conn:
        rows = {
            r.request_id: r
            for r in await conn.execute(
                select(
                    usage_records.c.request_id,
                    usage_records.c.status,
                    usage_records.c.prompt_tokens,
                    usage_records.c.cost_micro,
                    usage_records.c.ttft_ms,
                    usage_records.c.total_ms,
                    usage_records.c.attempts,
                )
            )
        }
    assert tuple(rows[rec.request_id])[1:] == (0, 0, 0, 0, 0, 0)
    assert (rows[big.request_id].status, rows[big.request_id].ttft_ms) == (999, 2**31 - 1)
    assert rows[big.request_id].attempts == 2**31 - 1
