"""Counter snapshots: the memory back end's counters as last saved (see fairgate.limits.snapshot).

    async with store.write() as conn:
        await counter_snapshots.replace(conn, saved, now)     # the whole set, atomically
    async with store.read() as conn:
        saved = await counter_snapshots.load(conn)

One snapshot per store: each ``replace`` deletes the previous set. Several
gateways on the memory back end sharing one store would overwrite each other's
(they count alone anyway; several processes share counters through Redis).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.limits.snapshot import SavedCounter
from fairgate.store.tables import counter_snapshots

__all__ = ["load", "replace"]

_C = counter_snapshots.c


async def replace(conn: AsyncConnection, saved: Sequence[SavedCounter], at: datetime) -> None:
    """Replace the stored snapshot with ``saved`` (in the caller's transaction)."""
    await conn.execute(delete(counter_snapshots))
    if saved:
        await conn.execute(
            insert(counter_snapshots),
            [{"key": c.key, "kind": c.kind, "data": dict(c.data), "saved_at": at} for c in saved],
        )


async def load(conn: AsyncConnection) -> list[SavedCounter]:
    """The stored snapshot (empty when none was saved)."""
    rows = await conn.execute(select(_C.key, _C.kind, _C.data).order_by(_C.id))
    return [SavedCounter(key, kind, data) for key, kind, data in rows]
