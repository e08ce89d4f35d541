"""The audit hash chain: appends from several writers form one chain; tampering is found."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

from sqlalchemy import delete, select, update

from fairgate.store import Store
from fairgate.store.audit_chain import (
    GENESIS,
    Break,
    ChainedRow,
    ChainHead,
    event_hash,
    first_break,
    row_hash,
)
from fairgate.store.audit_events import chain_rows, insert_event
from fairgate.store.tables import audit_events

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


async def _append(store: Store, count: int, *, actor: str = "user:olga") -> None:
    for i in range(count):
        async with store.write() as conn:
            await insert_event(
                conn,
                at=T0 + timedelta(seconds=i),
                actor=actor,
                action="key.created",
                target=f"key:{i}",
                org_id=1,
                team_id=2,
                remote="127.0.0.2",
                detail={"models": ["m", "n"], "rpm": i, "ratio": 0.1, "name": "é\u2028"},
            )


async def _verify(store: Store) -> Break | ChainHead:
    async with store.read() as conn:
        return first_break([row async for row in chain_rows(conn)])


async def _id_of(store: Store, seq: int) -> int:
    async with store.read() as conn:
        found = await conn.scalar(select(audit_events.c.id).where(audit_events.c.seq == seq))
    assert isinstance(found, int)
    return found


async def test_events_read_back_from_the_store_verify_and_the_head_is_the_last_hash(
    store: Store,
) -> None:
    await _append(store, 5)
    head = await _verify(store)
    async with store.read() as conn:
        rows = [row async for row in chain_rows(conn)]
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.hash for a, b in pairwise(rows))
    assert head == ChainHead(seq=5, hash=rows[-1].hash)


async def test_a_changed_detail_is_found_at_the_event_that_was_changed(store: Store) -> None:
    await _append(store, 5)
    victim = await _id_of(store, 3)
    async with store.write() as conn:  # someone with write access to the database
        await conn.execute(
            update(audit_events).where(audit_events.c.id == victim).values(detail={"rpm": 0})
        )
    broken = await _verify(store)
    assert isinstance(broken, Break)
    assert (broken.event_id, broken.seq, broken.kind) == (victim, 3, "content_changed")


async def test_a_changed_actor_with_a_recomputed_own_hash_breaks_the_next_link(
    store: Store,
) -> None:
    """Resealing the tampered row itself is not enough: the next event still links to the
    old hash."""
    await _append(store, 4)
    async with store.read() as conn:
        rows = [row async for row in chain_rows(conn)]
    row = rows[1]
    forged = row_hash(replace(row, actor="user:nobody"))
    async with store.write() as conn:
        await conn.execute(
            update(audit_events)
            .where(audit_events.c.id == row.id)
            .values(actor="user:nobody", hash=forged)
        )
    broken = await _verify(store)
    assert isinstance(broken, Break)
    assert (broken.event_id, broken.kind) == (rows[2].id, "link_broken")


async def test_a_deleted_middle_event_is_named_as_the_gap(store: Store) -> None:
    await _append(store, 5)
    after = await _id_of(store, 4)
    async with store.write() as conn:
        await conn.execute(delete(audit_events).where(audit_events.c.seq == 3))
    broken = await _verify(store)
    assert isinstance(broken, Break)
    assert (broken.event_id, broken.seq, broken.kind) == (after, 4, "event_missing")
    assert "seq 3 " in broken.message


async def test_concurrent_appends_in_one_process_form_one_chain(store: Store) -> None:
    await asyncio.gather(*(_append(store, 10, actor=f"user:u{n}") for n in range(4)))
    head = await _verify(store)
    assert isinstance(head, ChainHead)
    assert head.seq == 40


_WRITER = """
import asyncio, sys
from datetime import UTC, datetime
from fairgate.store import Store
from fairgate.store.audit_events import insert_event

async def one(store, name, n):
    for i in range(n):
        async with store.write() as conn:
            await insert_event(conn, at=datetime.now(UTC), actor=name, action="test.append",
                               detail={"i": i})

async def main(url, name):
    store = Store(url, timeout=30)
    await store.connect()
    try:
        await asyncio.gather(*(one(store, f"{name}-{t}", 25) for t in range(4)))
    finally:
        await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_appends_from_two_processes_at_once_form_one_chain(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    """Two processes, four writers each, 200 appends: one chain, seq 1..200, no conflict."""
    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    writers = [
        subprocess.Popen([sys.executable, str(script), store_url, name], stderr=subprocess.PIPE)
        for name in ("a", "b")
    ]
    for writer in writers:
        _, err = await asyncio.to_thread(writer.communicate, timeout=120)
        assert writer.returncode == 0, err.decode()
    head = await _verify(store)
    assert isinstance(head, ChainHead), head
    assert head.seq == 200
    async with store.read() as conn:
        actors = set((await conn.execute(select(audit_events.c.actor))).scalars())
    assert {a.split("-")[0] for a in actors} == {"a", "b"}


def _row(seq: int, prev_hash: bytes, *, detail: dict[str, int] | None = None) -> ChainedRow:
    content = {
        "seq": seq,
        "at": T0,
        "actor": "a",
        "action": "x",
        "target": None,
        "org_id": None,
        "team_id": None,
        "remote": None,
        "detail": detail,
    }
    sealed = event_hash(prev_hash=prev_hash, **content)  # type: ignore[arg-type]
    return ChainedRow(id=seq * 10, prev_hash=prev_hash, hash=sealed, **content)  # type: ignore[arg-type]


def test_a_repeated_seq_is_a_broken_link() -> None:
    one = _row(1, GENESIS)
    two = _row(2, one.hash)
    again = _row(2, two.hash)
    broken = first_break([one, two, again])
    assert isinstance(broken, Break)
    assert (broken.event_id, broken.kind) == (20, "link_broken")


def test_several_missing_events_are_named_as_a_range() -> None:
    one = _row(1, GENESIS)
    five = _row(5, one.hash)
    broken = first_break([one, five])
    assert isinstance(broken, Break)
    assert broken.message == "event missing: seq 2-4 after event 10"


def test_the_hash_covers_the_time_to_the_microsecond() -> None:
    base = _row(1, GENESIS)
    moved = event_hash(
        seq=1,
        at=T0 + timedelta(microseconds=1),
        actor="a",
        action="x",
        target=None,
        org_id=None,
        team_id=None,
        remote=None,
        detail=None,
        prev_hash=GENESIS,
    )
    assert moved != base.hash


def test_an_empty_chain_is_intact_at_genesis() -> None:
    assert first_break([]) == ChainHead(seq=0, hash=GENESIS)
