"""Usage records: one row per request, written in batches, summed in SQL for spend reports.

A record is keyed by its request id, and a batch is inserted with
``ON CONFLICT (request_id) DO NOTHING`` (SQLite and PostgreSQL alike), so writing
a batch again (a retry after a commit whose answer was lost) stores nothing
twice. A record's tags live in ``usage_record_tags``, written in the same
transaction and only for the records that batch actually added.

Reports group in the database: ``spend(conn, where, start=…, end=…,
group_by=("org", "team"))`` returns one :class:`SpendRow` per group. Grouping by
``tag`` joins the tags, so a record counts once under each of its tags (and
once under ``None`` when it has none).

A record's ``cost_micro`` is all the request was charged; the parts of it charged
to other models (an attempt on a model whose engine never answered, before the
record's model served) are rows of ``usage_record_costs``, written with the record.
Grouped or filtered by ``model`` or ``pool``, each such part counts under its own
model and pool, and the record's model keeps the rest: the sums read *lines*, the
record itself (with its request, tokens and estimated flag) and, for each part, one
line adding it to its model and one taking it from the record's. Any other report
reads the records alone, as the parts sum within them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    FromClause,
    Subquery,
    case,
    cast,
    delete,
    func,
    literal,
    select,
    true,
    union_all,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import usage_record_costs, usage_record_tags, usage_records

__all__ = [
    "COLUMNS",
    "DIMENSIONS",
    "Cost",
    "Row",
    "SpendRow",
    "delete_before",
    "insert_records",
    "insert_rows",
    "spend",
]

_R = usage_records.c
_T = usage_record_tags.c
_C = usage_record_costs.c

DIMENSIONS: Mapping[str, ColumnElement[Any]] = {
    "org": _R.org,
    "team": _R.team,
    "project": _R.project,
    "key": _R.key_id,
    "model": _R.model,
    "pool": _R.pool,
    "tag": _T.tag,
}
"""What a report may group or filter by, and the column each name reads."""


@dataclass(frozen=True, slots=True)
class SpendRow:
    """The sums of one group: ``groups`` holds its values in ``group_by`` order (None: unset).

    ``cost_micro`` is in micro GPU-hours; ``estimated`` counts the requests whose
    usage the gateway estimated because the engine never reported it.
    """

    groups: tuple[str | None, ...]
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost_micro: int
    estimated: int


def _insert(dialect: str, table: Any) -> Any:
    return postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)


COLUMNS: tuple[str, ...] = tuple(c.name for c in usage_records.columns)
"""The columns of ``usage_records`` in table order: the order of a :data:`Row`'s values."""

Row = tuple[Any, ...]
"""One record as the driver writes it: its values in :data:`COLUMNS` order (``at`` an aware
datetime), each already fit to its column."""

_ID, _AT = COLUMNS.index("request_id"), COLUMNS.index("at")

Cost = tuple[str, str | None, int]
"""A part of a record's cost charged to another model: (model, pool, cost_micro)."""


async def insert_records(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert ``rows`` (column names, plus ``tags``: a sequence of strings, and ``other_costs``:
    a sequence of :data:`Cost`); return how many were new. A row whose ``request_id`` is
    already stored is left out, tags and costs included."""
    values = [tuple([row.get(c) for c in COLUMNS]) for row in rows]
    tags = [row.get("tags", ()) for row in rows]
    return await insert_rows(conn, values, tags, [row.get("other_costs", ()) for row in rows])


async def insert_rows(
    conn: AsyncConnection,
    rows: Sequence[Row],
    tags: Sequence[Sequence[str]],
    costs: Sequence[Sequence[Cost]] = (),
) -> int:
    """Insert ``rows`` (:data:`Row`), ``tags[i]`` the tags of ``rows[i]`` and ``costs[i]`` the
    parts of its cost charged to other models (``costs`` empty: none has any); return how
    many were new. A row whose ``request_id`` is already stored is left out, tags and costs
    included."""
    if not rows:
        return 0
    dialect = conn.dialect.name
    if dialect == "sqlite":
        return await _insert_sqlite(conn, rows, tags, costs)
    records = [dict(zip(COLUMNS, row, strict=True)) for row in rows]
    statement = (
        _insert(dialect, usage_records)
        .on_conflict_do_nothing(index_elements=["request_id"])
        .returning(_R.request_id)
    )
    added = set((await conn.execute(statement, records)).scalars())
    await _insert_tags(conn, dialect, rows, tags, added)
    await _insert_costs(conn, rows, costs, added)
    return len(added)


async def _insert_costs(
    conn: AsyncConnection, rows: Sequence[Row], costs: Sequence[Sequence[Cost]], added: set[str]
) -> None:
    """The parts of the records just ``added`` charged to other models (rare: a general
    statement, on both dialects)."""
    parts = [
        {"request_id": row[_ID], "model": model, "pool": pool, "cost_micro": micro}
        for row, owed in zip(rows, costs, strict=True)
        if owed and row[_ID] in added
        for model, pool, micro in owed
    ]
    if parts:
        await conn.execute(
            _insert(conn.dialect.name, usage_record_costs).on_conflict_do_nothing(
                index_elements=["request_id", "model"]
            ),
            parts,
        )


_ROW = f"({', '.join('?' * len(COLUMNS))})"
_ROWS_PER_STATEMENT = 500  # 500 × 21 parameters, well under SQLite's 32,766


@functools.cache
def _sqlite_insert(rows: int, returning: bool) -> str:
    # Built from the table's own column names (no outside input), with ? parameters.
    return (
        f"INSERT INTO usage_records ({', '.join(COLUMNS)}) "  # noqa: S608
        f"VALUES {', '.join([_ROW] * rows)} ON CONFLICT (request_id) DO NOTHING"
        + (" RETURNING request_id" if returning else "")
    )


@functools.cache
def _sqlite_insert_tags(rows: int) -> str:
    return (
        "INSERT INTO usage_record_tags (request_id, tag) "  # noqa: S608
        f"VALUES {', '.join(['(?, ?)'] * rows)} ON CONFLICT (request_id, tag) DO NOTHING"
    )


def _sqlite_time(value: Any) -> Any:
    # What SQLAlchemy's SQLite DATETIME stores (UTC, naive text), so queries read it alike;
    # a naive moment is refused as the column type refuses it on the general path.
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise StatementError("timestamps must be aware datetimes (UTC)", None, None, None)
        if value.tzinfo is not UTC:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


async def _insert_sqlite(
    conn: AsyncConnection,
    rows: Sequence[Row],
    tags: Sequence[Sequence[str]],
    costs: Sequence[Sequence[Cost]],
) -> int:
    # One multi-row INSERT per 500 records, its parameters flattened, run on the driver;
    # the tags of the records it added likewise. Measured on the gateway: SQLAlchemy's
    # per-row parameter processing, and a plain executemany (one SQLite step per row,
    # each giving the GIL up and waiting to get it back from the busy event loop), each
    # cost about a fifth of a request's CPU. The rows come in column order, so the
    # parameters are their values laid end to end, the timestamp turned into SQLite's
    # text. Without tags SQLite's count of inserted rows is the count of new records;
    # with tags RETURNING names the records added, so a duplicate's tags are skipped as
    # on the general path; so do the parts of a cost charged to other models.
    owing = any(costs)
    tagged = owing or any(tags)
    width = len(COLUMNS)
    added = 0
    new: set[str] = set()
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[start : start + _ROWS_PER_STATEMENT]
        flat = [value for row in chunk for value in row]
        for at in range(_AT, len(flat), width):
            flat[at] = _sqlite_time(flat[at])
        result = await conn.exec_driver_sql(_sqlite_insert(len(chunk), tagged), tuple(flat))
        if tagged:
            new.update(result.scalars())
        else:
            added += max(0, result.rowcount)
    if not tagged:
        return added
    if owing:
        await _insert_costs(conn, rows, costs, new)
    pairs = [
        (row[_ID], tag)
        for row, names in zip(rows, tags, strict=True)
        if names and row[_ID] in new
        for tag in dict.fromkeys(names)
    ]
    for start in range(0, len(pairs), _ROWS_PER_STATEMENT):
        chunk_pairs = pairs[start : start + _ROWS_PER_STATEMENT]
        values = tuple([value for pair in chunk_pairs for value in pair])
        await conn.exec_driver_sql(_sqlite_insert_tags(len(chunk_pairs)), values)
    return len(new)


async def _insert_tags(
    conn: AsyncConnection,
    dialect: str,
    rows: Sequence[Row],
    tags: Sequence[Sequence[str]],
    added: set[str],
) -> None:
    pairs = [
        {"request_id": row[_ID], "tag": tag}
        for row, names in zip(rows, tags, strict=True)
        if row[_ID] in added
        for tag in dict.fromkeys(names)
    ]
    if pairs:
        await conn.execute(
            _insert(dialect, usage_record_tags).on_conflict_do_nothing(
                index_elements=["request_id", "tag"]
            ),
            pairs,
        )


_PER_MODEL = frozenset({"model", "pool"})
"""The dimensions a part of a cost charged to another model is counted under."""


def _source(group_by: Iterable[str]) -> FromClause:
    if "tag" in group_by:
        return usage_records.outerjoin(usage_record_tags, _T.request_id == _R.request_id)
    return usage_records


def _filter(name: str, value: str) -> ColumnElement[bool]:
    if name == "tag":
        tagged = select(_T.request_id).where(_T.tag == value)
        return _R.request_id.in_(tagged)
    return DIMENSIONS[name] == value


def _zero() -> ColumnElement[Any]:
    return cast(literal(0), BigInteger)


def _lines(conditions: Sequence[ColumnElement[bool]]) -> Subquery:
    """The records that meet ``conditions`` as lines of (model, pool, cost) (the module
    text): each record whole, and for each part of its cost charged to another model,
    one line adding it to that model and one taking it from the record's."""
    names = (_R.request_id, _R.org, _R.team, _R.project, _R.key_id)
    owed = usage_record_costs.join(usage_records, _C.request_id == _R.request_id)
    records = select(
        *names,
        _R.model,
        _R.pool,
        cast(literal(1), BigInteger).label("requests"),
        cast(_R.prompt_tokens, BigInteger).label("prompt_tokens"),
        cast(_R.completion_tokens, BigInteger).label("completion_tokens"),
        cast(_R.cached_tokens, BigInteger).label("cached_tokens"),
        cast(_R.cost_micro, BigInteger).label("cost_micro"),
        cast(case((_R.estimated, 1), else_=0), BigInteger).label("estimated"),
    ).where(*conditions)
    none = [_zero() for _ in range(4)]  # no request, no tokens: they stay with the record
    moved_to = (
        select(*names, _C.model, _C.pool, *none, _C.cost_micro, _zero())
        .select_from(owed)
        .where(*conditions)
    )
    moved_from = (
        select(*names, _R.model, _R.pool, *none, -_C.cost_micro, _zero())
        .select_from(owed)
        .where(*conditions)
    )
    return union_all(records, moved_to, moved_from).subquery("lines")


def _line_column(lines: Subquery, name: str) -> ColumnElement[Any]:
    return _T.tag if name == "tag" else lines.c[DIMENSIONS[name].name]


def _sum(column: ColumnElement[Any]) -> ColumnElement[Any]:
    # PostgreSQL sums BIGINT into NUMERIC; the cast keeps every total an exact integer.
    return cast(func.coalesce(func.sum(column), 0), BigInteger)


async def spend(
    conn: AsyncConnection,
    where: ColumnElement[bool] | None = None,
    *,
    start: datetime,
    end: datetime,
    group_by: Sequence[str] = (),
    filters: Mapping[str, str] | None = None,
) -> list[SpendRow]:
    """Sums of the records in ``[start, end)`` that match ``where`` and ``filters``, per group.

    ``group_by`` and the keys of ``filters`` are names of :data:`DIMENSIONS`
    (KeyError otherwise). With no ``group_by``, one row of grand totals (zeros
    when nothing matched). Rows come in no particular order. By ``model`` or
    ``pool``, the parts of a cost charged to other models count under theirs (the
    module text).
    """
    wanted = filters or {}
    if _PER_MODEL.intersection(group_by) or _PER_MODEL.intersection(wanted):
        return await _spend_by_model(conn, where, start, end, group_by, wanted)
    groups = [DIMENSIONS[name].label(f"g{i}") for i, name in enumerate(group_by)]
    query = (
        select(
            *groups,
            func.count().label("requests"),
            _sum(_R.prompt_tokens).label("prompt_tokens"),
            _sum(_R.completion_tokens).label("completion_tokens"),
            _sum(_R.cached_tokens).label("cached_tokens"),
            _sum(_R.cost_micro).label("cost_micro"),
            _sum(case((_R.estimated, 1), else_=0)).label("estimated"),
        )
        .select_from(_source(group_by))
        .where(where if where is not None else true(), _R.at >= start, _R.at < end)
    )
    for name, value in wanted.items():
        query = query.where(_filter(name, value))
    if groups:
        query = query.group_by(*groups)
    return await _rows(conn, query, len(groups))


async def _spend_by_model(
    conn: AsyncConnection,
    where: ColumnElement[bool] | None,
    start: datetime,
    end: datetime,
    group_by: Sequence[str],
    filters: Mapping[str, str],
) -> list[SpendRow]:
    """``spend`` over the lines (``_lines``): grouped or filtered by model or pool."""
    conditions = [where if where is not None else true(), _R.at >= start, _R.at < end]
    conditions += [_filter(n, v) for n, v in filters.items() if n not in _PER_MODEL]
    lines = _lines(conditions)
    groups = [_line_column(lines, name).label(f"g{i}") for i, name in enumerate(group_by)]
    source: FromClause = lines
    if "tag" in group_by:
        source = lines.outerjoin(usage_record_tags, _T.request_id == lines.c.request_id)
    query = select(
        *groups,
        _sum(lines.c.requests).label("requests"),
        _sum(lines.c.prompt_tokens).label("prompt_tokens"),
        _sum(lines.c.completion_tokens).label("completion_tokens"),
        _sum(lines.c.cached_tokens).label("cached_tokens"),
        _sum(lines.c.cost_micro).label("cost_micro"),
        _sum(lines.c.estimated).label("estimated"),
    ).select_from(source)
    for name, value in filters.items():
        if name in _PER_MODEL:
            query = query.where(_line_column(lines, name) == value)
    if groups:
        query = query.group_by(*groups)
    return await _rows(conn, query, len(groups))


async def _rows(conn: AsyncConnection, query: Any, width: int) -> list[SpendRow]:
    return [
        SpendRow(
            groups=tuple(row[:width]),
            requests=int(row.requests),
            prompt_tokens=int(row.prompt_tokens),
            completion_tokens=int(row.completion_tokens),
            cached_tokens=int(row.cached_tokens),
            cost_micro=int(row.cost_micro),
            estimated=int(row.estimated),
        )
        for row in await conn.execute(query)
    ]


async def delete_before(conn: AsyncConnection, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` of the oldest records that ended before ``before`` (and their
    tags and costs charged to other models); returns how many went. Small batches keep each
    transaction, and the locks it holds, short."""
    oldest = (
        select(usage_records.c.request_id)
        .where(usage_records.c.at < before)
        .order_by(usage_records.c.at)
        .limit(limit)
    )
    ids = list((await conn.execute(oldest)).scalars())
    if not ids:
        return 0
    tags = usage_record_tags.c.request_id
    await conn.execute(delete(usage_record_tags).where(tags.in_(ids)))
    await conn.execute(delete(usage_record_costs).where(_C.request_id.in_(ids)))
    await conn.execute(delete(usage_records).where(usage_records.c.request_id.in_(ids)))
    return len(ids)
