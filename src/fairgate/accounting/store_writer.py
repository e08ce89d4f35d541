"""The recorder's writer over the durable store: one batch, one transaction.

Each text is cut to its column's length, and NUL characters are left out,
before it is written: one record with an over-long model name or a stray NUL
must not make PostgreSQL refuse, and so lose, the whole batch it travels in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, String

from fairgate.accounting.record import UsageRecord
from fairgate.store import Store, usage_records
from fairgate.store.tables import usage_record_tags
from fairgate.store.tables import usage_records as table

__all__ = ["StoreUsageWriter"]


def _length(column: Column[Any]) -> int:
    kind = column.type
    return kind.length if isinstance(kind, String) and kind.length else 256


_LENGTHS = {c.name: _length(c) for c in table.columns if isinstance(c.type, String)}
_TAG_LENGTH = _length(usage_record_tags.c.tag)
_INT32 = 2**31 - 1


def _text(name: str, value: str | None) -> str | None:
    return None if value is None else _clean(value, _LENGTHS[name])


def _clean(value: str, length: int) -> str:
    # PostgreSQL refuses NUL in text, and would refuse the whole batch with it.
    return (value.replace("\x00", "") if "\x00" in value else value)[:length]


def _ms(value: int | None) -> int | None:
    return None if value is None else min(max(0, int(value)), _INT32)


class StoreUsageWriter:
    """Writes batches of :class:`UsageRecord` into ``usage_records`` (the ``UsageWriter``).

    :meth:`write` runs the whole batch in one transaction with
    ``ON CONFLICT (request_id) DO NOTHING`` and returns how many records were
    new; raises ``StoreUnavailable`` (nothing written) when the store fails.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    async def write(self, batch: Sequence[UsageRecord]) -> int:
        rows = [_row(record) for record in batch]
        tags = [_tags(record.tags) for record in batch]
        costs = [_costs(r.other_costs) if r.other_costs else () for r in batch]
        async with self._store.write() as conn:
            return await usage_records.insert_rows(conn, rows, tags, costs)


# Each column's length, by name: the row below is written out field by field (a record
# is one row of a batch of hundreds: a call per field was most of the writer's cost).
_ID = _LENGTHS["request_id"]
_KEY = _LENGTHS["key_id"]
_ORG = _LENGTHS["org"]
_TEAM = _LENGTHS["team"]
_PROJECT = _LENGTHS["project"]
_MODEL = _LENGTHS["model"]
_POOL = _LENGTHS["pool"]
_REPLICA = _LENGTHS["replica"]
_ROUTE = _LENGTHS["route"]
_OUTCOME = _LENGTHS["outcome"]
_ADDR = _LENGTHS["client_addr"]


def _row(r: UsageRecord) -> usage_records.Row:
    """``r`` as the driver writes it (``usage_records.COLUMNS`` order), each text cut to its
    column and without NUL, each number within its column's range."""
    texts = (
        f"{r.request_id}{r.key_id}{r.org}{r.team}{r.project}{r.model}{r.pool}"
        f"{r.replica}{r.route}{r.outcome}{r.client_addr}"
    )
    if "\x00" in texts:
        return _cleaned_row(r)
    status, ttft, total, attempts = r.status, r.ttft_ms, r.total_ms, r.attempts
    return (
        r.request_id[:_ID],
        r.at,
        r.key_id[:_KEY],
        r.org[:_ORG],
        r.team[:_TEAM],
        None if r.project is None else r.project[:_PROJECT],
        r.model[:_MODEL],
        None if r.pool is None else r.pool[:_POOL],
        r.replica[:_REPLICA] or None,
        r.route[:_ROUTE],
        0 if status < 0 else status if status < 999 else 999,
        r.outcome[:_OUTCOME],
        r.prompt_tokens if r.prompt_tokens > 0 else 0,
        r.completion_tokens if r.completion_tokens > 0 else 0,
        r.cached_tokens if r.cached_tokens > 0 else 0,
        r.cost_micro if r.cost_micro > 0 else 0,
        r.estimated,
        None if ttft is None else 0 if ttft < 0 else ttft if ttft < _INT32 else _INT32,
        0 if total <= 0 else total if total < _INT32 else _INT32,
        0 if attempts < 0 else attempts if attempts < _INT32 else _INT32,
        r.client_addr[:_ADDR] or None,
    )


def _tags(tags: tuple[str, ...]) -> tuple[str, ...]:
    return tuple([t[:_TAG_LENGTH] if "\x00" not in t else _clean(t, _TAG_LENGTH) for t in tags])


def _costs(parts: Sequence[usage_records.Cost]) -> list[usage_records.Cost]:
    """A record's ``other_costs`` as stored: names cut and cleaned as the record's own, a
    model named twice (cut to one name) counted once with both parts, none below zero."""
    merged: dict[str, tuple[str | None, int]] = {}
    for model, pool, micro in parts:
        name = _clean(model, _MODEL)
        before = merged.get(name, (None, 0))[1]
        merged[name] = (_text("pool", pool), before + max(0, micro))
    return [(model, pool, micro) for model, (pool, micro) in merged.items()]


def _cleaned_row(r: UsageRecord) -> usage_records.Row:
    """``_row`` for a record with a NUL in some text: every text cleaned (``_clean``)."""
    row: dict[str, Any] = {
        "request_id": _text("request_id", r.request_id),
        "at": r.at,
        "key_id": _text("key_id", r.key_id),
        "org": _text("org", r.org),
        "team": _text("team", r.team),
        "project": _text("project", r.project),
        "model": _text("model", r.model),
        "pool": _text("pool", r.pool),
        "replica": _text("replica", r.replica or None),
        "route": _text("route", r.route),
        "status": min(max(0, r.status), 999),
        "outcome": _text("outcome", r.outcome),
        "prompt_tokens": max(0, r.prompt_tokens),
        "completion_tokens": max(0, r.completion_tokens),
        "cached_tokens": max(0, r.cached_tokens),
        "cost_micro": max(0, r.cost_micro),
        "estimated": r.estimated,
        "ttft_ms": _ms(r.ttft_ms),
        "total_ms": _ms(r.total_ms) or 0,
        "attempts": min(max(0, r.attempts), _INT32),
        "client_addr": _text("client_addr", r.client_addr or None),
    }
    return tuple([row[c] for c in usage_records.COLUMNS])
