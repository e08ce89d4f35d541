"""Budgets as data: set, list, delete and raise temporarily, each within the actor's scope.

    b = await tenancy.budgets.set(actor, scope="team:lab-nlp", period="month",
                                  max=Money.from_units(100), soft=Money.from_units(80))
    await tenancy.budgets.increase(actor, b.id, by=Money.from_units(20), until=unix_seconds)
    book = await tenancy.budgets.book()        # fairgate.limits.BudgetBook, for the limiter

One budget per (scope, model, period): setting it again changes its caps and
keeps its id and its increases. Who may set which scope is in
``fairgate.tenancy.budget_scope``; each write carries that rule in its SQL and
commits with its audit event (``budget.set``, ``budget.increased``,
``budget.deleted``). Amounts are integer micro GPU-hours (``fairgate.core.money``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from fairgate.core.money import Money
from fairgate.limits.budgets import Budget, BudgetBook
from fairgate.store import StoreConflict, budgets, from_unix, keys, new_ulid, orgs, projects, teams
from fairgate.store.budgets import BudgetRow, NewBudgetRow
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.base import Service
from fairgate.tenancy.budget_record import BudgetRecord, limiter_budget, record_of
from fairgate.tenancy.budget_scope import BudgetScope, budgets_read, budgets_write, may_set
from fairgate.tenancy.errors import BadRequest, Forbidden, NotFound
from fairgate.tenancy.names import check_labels

__all__ = ["MAX_AMOUNT", "MAX_INCREASE", "PERIODS", "Budgets"]

PERIODS = ("day", "week", "month")
MAX_AMOUNT = Money.from_units(1_000_000_000)
"""Largest cap or increase accepted: 10⁹ GPU-hours."""
MAX_INCREASE = 366 * 86400.0
"""Longest temporary increase (seconds from now): a year."""


def _amount(field: str, amount: Money, *, positive: bool = False) -> int:
    low = 1 if positive else 0
    if not low <= amount.micro <= MAX_AMOUNT.micro:
        raise BadRequest(
            f"{field} must be {'above' if positive else 'at least'} 0 and at most "
            f"{MAX_AMOUNT} GPU-hours",
            code="invalid_amount",
        )
    return amount.micro


class Budgets(Service):
    """Budgets of the scopes the actor reads (listing) and sets (writes).

    Errors: BadRequest (scope, period, model, amount, expiry), NotFound (a scope
    or budget the actor cannot see), Forbidden (visible, but set from above).
    """

    async def list(self, actor: Actor, *, scope: str | None = None) -> Sequence[BudgetRecord]:
        where = BudgetScope.parse(scope) if scope is not None else None
        async with self._store.read() as conn:
            rows = await budgets.list_budgets(
                conn,
                budgets_read(actor),
                scope_kind=None if where is None else where.kind,
                scope=None if where is None else where.name,
                live_at=self._now(),
            )
        return [record_of(r) for r in rows]

    async def get(self, actor: Actor, budget_id: str) -> BudgetRecord:
        async with self._store.read() as conn:
            row = await budgets.by_id(conn, budget_id, budgets_read(actor), live_at=self._now())
        if row is None:
            raise NotFound(f"no budget {budget_id!r}", code="budget_not_found")
        return record_of(row)

    async def set(
        self,
        actor: Actor,
        *,
        scope: str,
        period: str,
        max: Money,  # the product's word for the cap
        soft: Money | None = None,
        model: str | None = None,
    ) -> BudgetRecord:
        """Create or change the budget of (scope, model, period); ``model`` None = every model."""
        target = BudgetScope.parse(scope)
        if period not in PERIODS:
            raise BadRequest(
                f"invalid period {period[:32]!r}: use day, week or month", code="invalid_period"
            )
        if model is not None:
            # stored under the canonical name, the one the limiter compares: a budget
            # kept under an alias would bind no request at all
            model = self._canonical_model(model)
        max_micro = _amount("max", max)
        soft_micro = None if soft is None else _amount("soft", soft)
        if soft_micro is not None and soft_micro > max_micro:
            raise BadRequest("soft must not exceed max", code="invalid_amount")
        for attempt in range(2):  # a concurrent first `set` of the same budget: update it
            try:
                return await self._set(actor, target, period, model, max_micro, soft_micro)
            except StoreConflict:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _set(
        self,
        actor: Actor,
        target: BudgetScope,
        period: str,
        model: str | None,
        max_micro: int,
        soft_micro: int | None,
    ) -> BudgetRecord:
        now = self._now()
        async with self._store.write() as conn:
            org_id, team_id = await self._place(conn, actor, target)
            if not may_set(actor, target.level, org_id, team_id):
                raise Forbidden(
                    f"the budget of {target} is set from above it (see docs/tenancy.md)",
                    code="forbidden",
                )
            new = NewBudgetRow(
                id=new_ulid(self._clock.wall()),
                scope_kind=target.kind,
                scope=target.name,
                model=model,
                period=period,
                max_micro=max_micro,
                soft_micro=soft_micro,
                org_id=org_id,
                team_id=team_id,
                created_by=actor.name,
            )
            done = await budgets.upsert(conn, new, now, budgets_write(actor))
            if done is None:
                raise Forbidden(f"the budget of {target} is not yours to change", code="forbidden")
            budget_id, created = done
            detail = {
                "scope": str(target),
                "model": model,
                "period": period,
                "max_micro": max_micro,
                "soft_micro": soft_micro,
                "created": created,
            }
            await self._audit(
                conn, actor, "budget.set", now, target=f"budget:{budget_id}",
                org_id=org_id, team_id=team_id, detail=detail,
            )  # fmt: skip
            row = await budgets.by_id(conn, budget_id, live_at=now)
        assert row is not None
        return record_of(row)

    async def _place(
        self, conn: AsyncConnection, actor: Actor, target: BudgetScope
    ) -> tuple[int | None, int | None]:
        """(org_id, team_id) of a scope the actor can see; NotFound otherwise."""
        scope = self._scope(actor)
        missing = NotFound(f"no {target.kind} {target.name!r}", code=f"{target.kind}_not_found")
        kind: str = target.kind
        name = target.name
        if kind == "tag":
            assert target.tag is not None
            check_labels("tag", [target.tag])
            tag_owner = target.owner
            if tag_owner is None:
                if not actor.root_reader:
                    raise Forbidden(
                        "proxy-wide tag budgets are set by proxy admins; a tenant's tag "
                        "budget is tag:org:ORG/TAG or tag:team:TEAM/TAG",
                        code="forbidden",
                    )
                return None, None
            kind, name = tag_owner  # placed, and found or not, like its owner
            missing = NotFound(f"no {kind} {name!r}", code=f"{kind}_not_found")
        if kind == "org":
            org = await orgs.by_name(conn, name, scope.orgs_read())
            if org is None:
                raise missing
            return org.id, None
        team_id: int | None = None
        if kind == "team":
            team = await teams.by_name(conn, name, scope.teams_read())
            team_id = None if team is None else team.id
        elif target.kind == "project":
            team_name, _, name = target.name.partition("/")
            project = await projects.by_name(conn, team_name, name, scope.projects_read())
            team_id = None if project is None else project.team_id
        else:
            key = await keys.get_key(conn, target.name, scope.keys_read())
            team_id = None if key is None else key.team_id
        owner = None if team_id is None else await teams.by_id(conn, team_id)
        if owner is None:
            raise missing
        return owner.org_id, owner.id

    async def delete(self, actor: Actor, budget_id: str) -> BudgetRecord:
        """Delete a budget and its increases; returns it as it was."""
        now = self._now()
        async with self._store.write() as conn:
            row = await self._writable(conn, actor, budget_id, now, "deleting")
            await budgets.delete_budget(conn, budget_id, budgets_write(actor))
            await self._audit(
                conn, actor, "budget.deleted", now, target=f"budget:{budget_id}",
                org_id=row.org_id, team_id=row.team_id,
                detail={"scope": f"{row.scope_kind}:{row.scope}", "model": row.model,
                        "period": row.period},
            )  # fmt: skip
        return record_of(row)

    async def increase(
        self,
        actor: Actor,
        budget_id: str,
        *,
        by: Money,
        until: float | None = None,
        lasting: float | None = None,
    ) -> BudgetRecord:
        """Raise the cap by ``by`` until ``until`` (Unix seconds) or for ``lasting`` seconds
        from now (exactly one of the two); the end must lie within a year from now."""
        amount = _amount("the increase", by, positive=True)
        now_s = self._clock.wall()
        if (until is None) == (lasting is None):
            raise BadRequest("give either an end or a duration", code="invalid_expiry")
        until = now_s + lasting if lasting is not None else until
        assert until is not None
        if not now_s < until <= now_s + MAX_INCREASE:
            raise BadRequest(
                "an increase must end in the future, within a year", code="invalid_expiry"
            )
        now = self._now()
        async with self._store.write() as conn:
            row = await self._writable(conn, actor, budget_id, now, "raising")
            await budgets.add_increase(
                conn, budget_id, amount_micro=amount, expires_at=from_unix(until), now=now,
                created_by=actor.name, where=budgets_write(actor),
            )  # fmt: skip
            await self._audit(
                conn, actor, "budget.increased", now, target=f"budget:{budget_id}",
                org_id=row.org_id, team_id=row.team_id,
                detail={"amount_micro": amount, "expires_at": from_unix(until).isoformat()},
            )  # fmt: skip
            changed = await budgets.by_id(conn, budget_id, live_at=now)
        assert changed is not None
        return record_of(changed)

    async def _writable(
        self, conn: AsyncConnection, actor: Actor, budget_id: str, now: datetime, verb: str
    ) -> BudgetRow:
        row = await budgets.by_id(conn, budget_id, budgets_write(actor), live_at=now)
        if row is not None:
            return row
        if await budgets.by_id(conn, budget_id, budgets_read(actor)) is None:
            raise NotFound(f"no budget {budget_id!r}", code="budget_not_found")
        raise Forbidden(f"{verb} budget {budget_id!r} is for the level above", code="forbidden")

    async def snapshot(self) -> tuple[Budget, ...]:
        """Every budget with the increases running now, for the limiter (no actor: the gateway)."""
        async with self._store.read() as conn:
            # every one: a budget missing from the book is never enforced
            rows = await budgets.list_budgets(conn, live_at=self._now(), limit=None)
        # A budget stored under an alias (before names were canonicalised on the way in)
        # binds the model the alias stands for.
        return tuple(limiter_budget(r, self.canonical_model) for r in rows)

    async def book(self) -> BudgetBook:
        """Every stored budget as the limiter's book; call at start-up and on a refresh timer.

        Raises StoreUnavailable when the database does not answer (keep the previous book).
        """
        return BudgetBook(await self.snapshot())
