"""Spend reports: the usage records of a period, summed in SQL per group, seen through a scope.

    report = await spend(store, actor, "2025-10-01", "2025-11-01", ("org", "team"))
    print(to_parsable2(report))                       # fairgate.accounting.formats

A period is ``[from, to)`` in UTC: ``from`` at 00:00 included, ``to`` at 00:00
excluded, so October is ``2025-10-01`` to ``2025-11-01``. Groups are any of
``org, team, project, key, model, pool, tag``. A record has several tags: grouped
by ``tag``, it counts once under each of its tags (once under an empty tag when
it has none), so the rows' sums can exceed ``total``, which counts each record
once. By ``model`` or ``pool``, the parts of a record's cost charged to other models
(``UsageRecord.other_costs``) count under theirs, the rest and the request under the
record's own (``fairgate.store.usage_records``): the rows still add up to ``total``.

What an actor sees follows the tenancy rules for keys
(``fairgate.tenancy.scope.Scope.keys_read``): proxy admins and viewers see every
record; organisation admins and viewers the records of their organisation's
keys; team admins and team viewers their team's; members their own keys'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import ColumnElement, select

from fairgate.core.errors import BadRequest
from fairgate.store import Store, usage_records
from fairgate.store.tables import keys
from fairgate.store.tables import usage_records as records_table
from fairgate.store.usage_records import SpendRow
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.scope import Scope

__all__ = [
    "DEFAULT_GROUP_BY",
    "GROUPS",
    "SpendReport",
    "key_spend",
    "parse_day",
    "parse_group_by",
    "spend",
]

GROUPS = ("org", "team", "project", "key", "model", "pool", "tag")
"""The dimensions a report may group and filter by."""

DEFAULT_GROUP_BY = ("org", "team")


@dataclass(frozen=True, slots=True)
class SpendReport:
    """The rows of one report, sorted by their group values, and the period's ``total``.

    ``total`` sums each matching record once, whatever ``group_by`` says.
    """

    start: datetime
    end: datetime
    group_by: tuple[str, ...]
    rows: tuple[SpendRow, ...]
    total: SpendRow


def parse_day(text: str, *, field: str = "date") -> datetime:
    """``YYYY-MM-DD`` as 00:00 UTC that day; BadRequest otherwise."""
    try:
        day = date.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(
            f"{field}: expected a date as YYYY-MM-DD, got {text[:40]!r}", code="invalid_date"
        ) from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def parse_group_by(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """``"org,team"`` (or a sequence) as checked dimension names, in order, without repeats.

    None gives :data:`DEFAULT_GROUP_BY`; ``""`` gives no grouping (one row of totals).
    """
    if text is None:
        return DEFAULT_GROUP_BY
    parts = text.split(",") if isinstance(text, str) else list(text)
    names = tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise BadRequest(
            f"group_by: unknown {unknown[0][:40]!r}; use any of {', '.join(GROUPS)}",
            code="invalid_group_by",
        )
    return names


def _filters(filters: Mapping[str, str | None] | None) -> dict[str, str]:
    given = {k: v for k, v in (filters or {}).items() if v is not None}
    unknown = [k for k in given if k not in GROUPS]
    if unknown:
        raise BadRequest(f"unknown filter {unknown[0][:40]!r}", code="invalid_filter")
    return given


def _visible(actor: Actor) -> ColumnElement[bool] | None:
    """The records ``actor`` may read: those of keys it may read (None: every record).

    A proxy reader also sees records that name no stored key (a refused request).
    """
    if actor.root_reader:
        return None
    readable = select(keys.c.id).where(Scope(actor).keys_read())
    return records_table.c.key_id.in_(readable)


def _period(start: datetime | str, end: datetime | str) -> tuple[datetime, datetime]:
    begin = parse_day(start, field="from") if isinstance(start, str) else start
    finish = parse_day(end, field="to") if isinstance(end, str) else end
    if finish <= begin:
        raise BadRequest("to must be after from (the period is [from, to))", code="invalid_range")
    return begin, finish


def _chunks(
    start: datetime, end: datetime, step: timedelta | None
) -> list[tuple[datetime, datetime]]:
    if step is None or step <= timedelta(0):
        return [(start, end)]
    bounds = []
    at = start
    while at < end:
        bounds.append((at, min(at + step, end)))
        at += step
    return bounds


def _add(a: SpendRow, b: SpendRow) -> SpendRow:
    return SpendRow(
        groups=a.groups,
        requests=a.requests + b.requests,
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        cost_micro=a.cost_micro + b.cost_micro,
        estimated=a.estimated + b.estimated,
    )


def _merge(rows: Iterable[SpendRow]) -> tuple[SpendRow, ...]:
    merged: dict[tuple[str | None, ...], SpendRow] = {}
    for row in rows:
        seen = merged.get(row.groups)
        merged[row.groups] = row if seen is None else _add(seen, row)
    # Sorted here, not in SQL: collations differ between SQLite and PostgreSQL.
    return tuple(
        sorted(merged.values(), key=lambda r: [(g is not None, g or "") for g in r.groups])
    )


async def spend(
    store: Store,
    actor: Actor,
    from_: datetime | str,
    to: datetime | str,
    group_by: str | Sequence[str] | None = DEFAULT_GROUP_BY,
    *,
    filters: Mapping[str, str | None] | None = None,
    chunk: timedelta | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SpendReport:
    """The spend of ``[from_, to)`` that ``actor`` may see, grouped by ``group_by``.

    ``filters`` keeps the records whose dimension equals the value (``{"team":
    "lab-nlp"}``; a ``tag`` filter keeps the records carrying it; None values
    are ignored). ``chunk`` splits the period into queries of that length (one
    read transaction each), calling ``progress(done, count)`` after each; the
    sums are exact integers either way. BadRequest for an unknown dimension or
    filter, a bad date or an empty period; StoreUnavailable when the store fails.
    """
    start, end = _period(from_, to)
    groups = parse_group_by(group_by)
    where = _visible(actor)
    wanted = _filters(filters)
    pieces = _chunks(start, end, chunk)
    rows: list[SpendRow] = []
    totals: list[SpendRow] = []
    for done, (begin, finish) in enumerate(pieces, 1):
        async with store.read() as conn:
            rows += await usage_records.spend(
                conn, where, start=begin, end=finish, group_by=groups, filters=wanted
            )
            totals += await usage_records.spend(
                conn, where, start=begin, end=finish, filters=wanted
            )
        if progress is not None:
            progress(done, len(pieces))
    (total,) = _merge(totals)
    return SpendReport(start, end, groups, _merge(rows), total)


async def key_spend(store: Store, key_id: str, from_: datetime, to: datetime) -> SpendRow:
    """What one key spent in ``[from_, to)`` (for ``GET /me``: the caller is the key itself)."""
    async with store.read() as conn:
        (row,) = await usage_records.spend(conn, start=from_, end=to, filters={"key": key_id})
    return row
