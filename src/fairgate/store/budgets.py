"""Budgets and their temporary increases: amounts in integer micro-units, never floats.

One row per (scope kind, scope, model, period); ``model`` is stored as ``""``
for "every model" so that the uniqueness rule holds on both back ends, and read
back as None. ``org_id`` and ``team_id`` place a budget in the tree for the
scope clauses of the tenancy layer. Functions run in the caller's transaction
and take that layer's ``where`` clause, applied in the UPDATE or DELETE itself
(see ``fairgate.store.orgs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import ColumnElement, RowMapping, delete, insert, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.store.tables import budget_increases, budgets

__all__ = [
    "BudgetRow",
    "IncreaseRow",
    "NewBudgetRow",
    "add_increase",
    "by_id",
    "delete_budget",
    "list_budgets",
    "move_team",
    "upsert",
]


@dataclass(frozen=True, slots=True)
class IncreaseRow:
    """``amount_micro`` more until ``expires_at`` (exclusive), whatever the period."""

    amount_micro: int
    expires_at: datetime
    created_at: datetime
    created_by: str


@dataclass(frozen=True, slots=True)
class BudgetRow:
    """A stored budget; ``model`` None = every model; ``soft_micro`` None = no soft limit."""

    id: str
    scope_kind: str
    scope: str
    model: str | None
    period: str
    max_micro: int
    soft_micro: int | None
    org_id: int | None
    team_id: int | None
    created_at: datetime
    created_by: str
    updated_at: datetime
    increases: tuple[IncreaseRow, ...] = ()


@dataclass(frozen=True, slots=True)
class NewBudgetRow:
    """What ``upsert`` writes: the key (kind, scope, model, period) and the caps."""

    id: str
    scope_kind: str
    scope: str
    model: str | None
    period: str
    max_micro: int
    soft_micro: int | None
    org_id: int | None
    team_id: int | None
    created_by: str


def _budget(mapping: RowMapping) -> BudgetRow:
    values = dict(mapping)
    values["model"] = values["model"] or None
    return BudgetRow(**values)


async def _with_increases(
    conn: AsyncConnection, rows: Sequence[BudgetRow], since: datetime | None
) -> list[BudgetRow]:
    if not rows:
        return []
    query = select(
        budget_increases.c.budget_id,
        budget_increases.c.amount_micro,
        budget_increases.c.expires_at,
        budget_increases.c.created_at,
        budget_increases.c.created_by,
    ).order_by(budget_increases.c.expires_at, budget_increases.c.id)
    if len(rows) <= 500:
        query = query.where(budget_increases.c.budget_id.in_([r.id for r in rows]))
    if since is not None:
        query = query.where(budget_increases.c.expires_at > since)
    found: dict[str, list[IncreaseRow]] = {}
    for row in await conn.execute(query):
        values = dict(row._mapping)
        found.setdefault(values.pop("budget_id"), []).append(IncreaseRow(**values))
    return [replace(r, increases=tuple(found.get(r.id, ()))) for r in rows]


async def list_budgets(
    conn: AsyncConnection,
    where: ColumnElement[bool] | None = None,
    *,
    scope_kind: str | None = None,
    scope: str | None = None,
    live_at: datetime | None = None,
    limit: int | None = 10_000,
) -> list[BudgetRow]:
    """Budgets in ``where``, by scope; with ``live_at``, only increases running then;
    at most ``limit`` of them (None: every one, as the limiter's book needs)."""
    query = select(*budgets.c).where(where if where is not None else true())
    if scope_kind is not None:
        query = query.where(budgets.c.scope_kind == scope_kind)
    if scope is not None:
        query = query.where(budgets.c.scope == scope)
    query = query.order_by(
        budgets.c.scope_kind, budgets.c.scope, budgets.c.model, budgets.c.period
    ).limit(limit)
    rows = [_budget(row._mapping) for row in await conn.execute(query)]
    return await _with_increases(conn, rows, live_at)


async def by_id(
    conn: AsyncConnection,
    budget_id: str,
    where: ColumnElement[bool] | None = None,
    *,
    live_at: datetime | None = None,
) -> BudgetRow | None:
    query = select(*budgets.c).where(
        budgets.c.id == budget_id, where if where is not None else true()
    )
    row = (await conn.execute(query)).one_or_none()
    if row is None:
        return None
    return (await _with_increases(conn, [_budget(row._mapping)], live_at))[0]


async def upsert(
    conn: AsyncConnection, new: NewBudgetRow, now: datetime, where: ColumnElement[bool]
) -> tuple[str, bool] | None:
    """Set the caps of the budget (kind, scope, model, period), creating it if absent.

    Returns (id, created), or None when the budget exists outside ``where``.
    Its increases are kept when it is set again. A concurrent creation of the
    same budget raises StoreConflict (the caller retries).
    """
    key = (
        budgets.c.scope_kind == new.scope_kind,
        budgets.c.scope == new.scope,
        budgets.c.model == (new.model or ""),
        budgets.c.period == new.period,
    )
    changed = (
        await conn.execute(
            update(budgets)
            .where(*key, where)
            .values(max_micro=new.max_micro, soft_micro=new.soft_micro, updated_at=now)
            .returning(budgets.c.id)
        )
    ).scalar_one_or_none()
    if changed is not None:
        return changed, False
    if (await conn.execute(select(budgets.c.id).where(*key))).one_or_none() is not None:
        return None
    await conn.execute(
        insert(budgets).values(
            id=new.id,
            scope_kind=new.scope_kind,
            scope=new.scope,
            model=new.model or "",
            period=new.period,
            max_micro=new.max_micro,
            soft_micro=new.soft_micro,
            org_id=new.org_id,
            team_id=new.team_id,
            created_at=now,
            created_by=new.created_by,
            updated_at=now,
        )
    )
    return new.id, True


async def delete_budget(
    conn: AsyncConnection, budget_id: str, where: ColumnElement[bool] | None = None
) -> bool:
    """Delete a budget in scope and its increases; False when no row in scope matched."""
    in_scope = budgets.c.id == budget_id, where if where is not None else true()
    await conn.execute(
        delete(budget_increases).where(
            budget_increases.c.budget_id.in_(select(budgets.c.id).where(*in_scope))
        )
    )
    gone = await conn.execute(delete(budgets).where(*in_scope).returning(budgets.c.id))
    return gone.one_or_none() is not None


async def move_team(conn: AsyncConnection, team_id: int, org_id: int) -> None:
    """Place the budgets inside team ``team_id`` (its own, its projects', its keys') under
    ``org_id``: the team moved, and its old organisation's admins no longer reach them."""
    await conn.execute(update(budgets).where(budgets.c.team_id == team_id).values(org_id=org_id))


async def add_increase(
    conn: AsyncConnection,
    budget_id: str,
    *,
    amount_micro: int,
    expires_at: datetime,
    now: datetime,
    created_by: str,
    where: ColumnElement[bool] | None = None,
) -> bool:
    """Add a temporary increase to a budget in scope; False when no row in scope matched."""
    touched = (
        await conn.execute(
            update(budgets)
            .where(budgets.c.id == budget_id, where if where is not None else true())
            .values(updated_at=now)
            .returning(budgets.c.id)
        )
    ).scalar_one_or_none()
    if touched is None:
        return False
    await conn.execute(
        insert(budget_increases).values(
            budget_id=budget_id,
            amount_micro=amount_micro,
            expires_at=expires_at,
            created_at=now,
            created_by=created_by,
        )
    )
    return True
