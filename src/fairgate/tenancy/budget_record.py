"""The public form of a budget, its conversion for the limiter, and moments as text.

record_of(row)        BudgetRecord: what the admin API and the CLI show
limiter_budget(row)   fairgate.limits.Budget: what the limiter charges
parse_moment("2026-12-31T00:00Z")  Unix seconds (no offset: UTC)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fairgate.core.errors import BadRequest
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget, Increase
from fairgate.store.budgets import BudgetRow

__all__ = ["BudgetRecord", "limiter_budget", "parse_moment", "record_of"]


@dataclass(frozen=True, slots=True)
class BudgetRecord:
    """A budget as readers see it: GPU-hours as exact decimal text, and in micro-units.

    ``effective_max`` is ``max`` plus the increases running now; ``increases``
    lists only those (``amount``, ``amount_micro``, ``expires_at``, ``created_by``).
    """

    id: str
    scope: str
    model: str | None
    period: str
    max: str
    soft: str | None
    effective_max: str
    max_micro: int
    soft_micro: int | None
    increases: tuple[dict[str, Any], ...]
    created_at: datetime
    created_by: str
    updated_at: datetime


def record_of(row: BudgetRow) -> BudgetRecord:
    extra = sum(i.amount_micro for i in row.increases)
    return BudgetRecord(
        id=row.id,
        scope=f"{row.scope_kind}:{row.scope}",
        model=row.model,
        period=row.period,
        max=str(Money(row.max_micro)),
        soft=None if row.soft_micro is None else str(Money(row.soft_micro)),
        effective_max=str(Money(row.max_micro + extra)),
        max_micro=row.max_micro,
        soft_micro=row.soft_micro,
        increases=tuple(
            {
                "amount": str(Money(i.amount_micro)),
                "amount_micro": i.amount_micro,
                "expires_at": i.expires_at,
                "created_by": i.created_by,
            }
            for i in row.increases
        ),
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
    )


def limiter_budget(row: BudgetRow, canonical: Callable[[str], str] = str) -> Budget:
    """The limiter's form of ``row``, its model named by ``canonical`` (alias → model)."""
    return Budget(
        row.scope_kind,  # type: ignore[arg-type]  # checked on the way in
        row.scope,
        None if row.model is None else canonical(row.model),
        row.period,  # type: ignore[arg-type]
        max=Money(row.max_micro),
        soft=None if row.soft_micro is None else Money(row.soft_micro),
        increases=tuple(
            Increase(Money(i.amount_micro), i.expires_at.timestamp()) for i in row.increases
        ),
    )


def parse_moment(text: str) -> float:
    """An RFC 3339 / ISO 8601 moment as Unix seconds; without an offset it is UTC.

    BadRequest (code ``invalid_moment``) when it does not parse.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BadRequest(
            f"invalid moment {text[:64]!r}: use e.g. 2026-12-31T00:00Z", code="invalid_moment"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
