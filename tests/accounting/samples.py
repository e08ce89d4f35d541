"""Usage records for tests, and ways to read back what the store holds or to stall it."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from itertools import count

import asyncpg
from sqlalchemy import func, select

from fairgate.accounting import UsageRecord
from fairgate.accounting.journal import ENTRY_FIELDS
from fairgate.store import Store
from fairgate.store.tables import usage_records

__all__ = ["DAY0", "hold_write_lock", "random_records", "record", "stored_count"]

DAY0 = datetime(2025, 10, 1, tzinfo=UTC)
_ids = count(1)


def record(**fields: object) -> UsageRecord:
    """A record with a fresh request id at noon of DAY0, ``fields`` overriding the rest."""
    base: dict[str, object] = {
        "request_id": f"req-{next(_ids):08d}",
        "at": DAY0 + timedelta(hours=12),
        "key_id": "k-1",
        "org": "A",
        "team": "a1",
        "model": "llama-70b",
        "pool": "gpu",
        "replica": "r1",
        "route": "chat",
        "status": 200,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "cost_micro": 7,
        "total_ms": 120,
        "ttft_ms": 30,
        "attempts": 1,
    }
    base.update(fields)
    return UsageRecord(**base)  # type: ignore[arg-type]


def random_records(
    n: int, keys: dict[str, tuple[str, str, str | None]], *, seed: int = 7, days: int = 3
) -> Iterator[UsageRecord]:
    """``n`` records over ``days`` days from DAY0 for ``keys`` (key id → org, team, project);
    about one in six was charged in part to other models (``other_costs``)."""
    rng = random.Random(seed)
    key_ids = sorted(keys)
    models = ["llama-70b", "llama-8b", "qwen-32b"]
    for _ in range(n):
        key_id = rng.choice(key_ids)
        org, team, project = keys[key_id]
        prompt = rng.randrange(0, 5000)
        model = rng.choice(models)
        cost = rng.randrange(0, 3_000_000)
        others = [m for m in models if m != model and rng.random() < 0.1]
        yield record(
            at=DAY0 + timedelta(seconds=rng.randrange(0, days * 86400)),
            key_id=key_id,
            org=org,
            team=team,
            project=project,
            tags=tuple(rng.sample(["batch", "eval", "x|y"], rng.randrange(0, 3))),
            model=model,
            pool=rng.choice(["gpu", "gpu2", None]),
            prompt_tokens=prompt,
            cached_tokens=rng.randrange(0, prompt + 1),
            completion_tokens=rng.randrange(0, 2000),
            cost_micro=cost,
            estimated=rng.random() < 0.2,
            # each part within the cost, so that the record's model keeps what is left
            other_costs=tuple(
                (m, rng.choice(["gpu", "gpu3", None]), cost // 3 + 1) for m in others if cost
            ),
        )


async def stored_count(store: Store) -> int:
    async with store.read() as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(usage_records))).scalar_one()
        )


@asynccontextmanager
async def hold_write_lock(store: Store) -> AsyncIterator[None]:
    """Another connection holds the lock writers need until the block ends (a stalled store).

    Readers go on: WAL on SQLite, and on PostgreSQL an EXCLUSIVE lock lets SELECT through.
    """
    if store.dialect == "sqlite":
        path = store.url.url.database
        assert path is not None
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    dsn = store.url.url.set(drivername="postgresql").render_as_string(hide_password=False)
    pg = await asyncpg.connect(dsn, timeout=10)
    try:
        transaction = pg.transaction()
        await transaction.start()
        await pg.execute("LOCK TABLE usage_records IN EXCLUSIVE MODE")
        try:
            yield
        finally:
            await transaction.rollback()
    finally:
        await asyncio.wait_for(pg.close(), 10)


def entry(rec: UsageRecord) -> tuple[object, ...]:
    """``rec`` as the write-ahead entry that stands for it (``journal.ENTRY_FIELDS``)."""
    return tuple(
        rec.at.timestamp() if name == "at" else getattr(rec, name) for name in ENTRY_FIELDS
    )
