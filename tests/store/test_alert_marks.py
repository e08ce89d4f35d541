"""Alert marks: one claim per budget and period, given back on failure, taken over when stale."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from fairgate.store import Store
from fairgate.store import alert_marks as marks

NOW = datetime(2025, 10, 14, 12, tzinfo=UTC)
END = datetime(2025, 11, 1, tzinfo=UTC)
KEY = "budget:team:lab-nlp:*:month:2025-10"


async def claim(store: Store, key: str = KEY, now: datetime = NOW, stale: float = 600) -> bool:
    async with store.write() as conn:
        return await marks.claim(conn, key, now=now, period_end=END, stale_after=stale)


async def test_the_first_claim_wins_and_every_later_one_loses(store: Store) -> None:
    assert await claim(store)
    assert not await claim(store)
    assert not await claim(store, now=NOW + timedelta(seconds=30))
    # Another period of the same budget is another alert.
    assert await claim(store, key="budget:team:lab-nlp:*:month:2025-11")


async def test_of_concurrent_claims_exactly_one_wins(store: Store) -> None:
    results = await asyncio.gather(*(claim(store) for _ in range(8)))
    assert sorted(results) == [False] * 7 + [True]


async def test_a_sent_mark_keeps_its_channels_and_is_never_claimed_again(store: Store) -> None:
    assert await claim(store)
    async with store.write() as conn:
        await marks.mark_sent(conn, KEY, now=NOW, channels={"webhook": "sent", "smtp": "failed"})
    # Long after, the mark still holds: a sent alert is never taken over.
    assert not await claim(store, now=NOW + timedelta(days=3), stale=1)
    async with store.write() as conn:
        assert not await marks.release(conn, KEY)  # only an unsent claim can be given back
    async with store.read() as conn:
        mark = await marks.find(conn, KEY)
    assert mark is not None
    assert (mark.counter_key, mark.sent_at, mark.period_end) == (KEY, NOW, END)
    assert mark.channels == {"webhook": "sent", "smtp": "failed"}


async def test_a_claim_given_back_can_be_claimed_again(store: Store) -> None:
    assert await claim(store)
    async with store.write() as conn:
        assert await marks.release(conn, KEY)
    async with store.read() as conn:
        assert await marks.find(conn, KEY) is None
    assert await claim(store)


async def test_an_unsent_claim_is_taken_over_once_it_is_stale(store: Store) -> None:
    assert await claim(store)
    assert not await claim(store, now=NOW + timedelta(seconds=599))
    later = NOW + timedelta(seconds=601)
    assert await claim(store, now=later)
    assert not await claim(store, now=later + timedelta(seconds=1))  # the new claim is fresh
    async with store.read() as conn:
        mark = await marks.find(conn, KEY)
    assert mark is not None and mark.claimed_at == later and mark.sent_at is None


async def test_a_very_long_counter_key_is_one_mark(store: Store) -> None:
    long_key = "budget:tag:" + "%E2%82%AC" * 400 + ":*:day:2025-10-14"
    assert await claim(store, key=long_key)
    assert not await claim(store, key=long_key)
    async with store.read() as conn:
        mark = await marks.find(conn, long_key)
    assert mark is not None and mark.counter_key == long_key


async def test_pruning_removes_only_marks_of_periods_over(store: Store) -> None:
    assert await claim(store)
    async with store.write() as conn:
        await marks.claim(
            conn, "old", now=NOW, period_end=datetime(2025, 9, 1, tzinfo=UTC), stale_after=600
        )
        assert await marks.prune(conn, before=datetime(2025, 10, 1, tzinfo=UTC)) == 1
    async with store.read() as conn:
        assert await marks.find(conn, "old") is None
        assert await marks.find(conn, KEY) is not None
