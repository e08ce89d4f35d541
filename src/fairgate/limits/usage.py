"""A key's current standing against its limits and budgets, for ``GET /me`` and reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fairgate.core.limits import Limits
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget
from fairgate.limits.periods import PeriodSpan

__all__ = ["BudgetUsage", "Usage"]


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """One budget in its current period: reserved-or-spent so far against the cap in force."""

    budget: Budget
    period: PeriodSpan
    spent: Money
    limit: Money

    @property
    def remaining(self) -> Money:
        return Money(max(0, self.limit.micro - self.spent.micro))


@dataclass(frozen=True, slots=True)
class Usage:
    """Counts in the current windows and day; None where the limit is absent (not counted).

    ``requests_last_minute`` and ``tokens_last_minute`` are sliding-window
    weights (estimates until corrected), ``requests_today`` the day counter in
    the limiter's zone, ``in_flight`` the slots held now. ``team_limits`` are the
    team's totals and ``team_used`` their counts ("rpm", "tpm", "rpd", "inflight"),
    all the team's keys together.
    """

    limits: Limits
    requests_last_minute: int | None
    tokens_last_minute: int | None
    requests_today: int | None
    in_flight: int | None
    budgets: tuple[BudgetUsage, ...]
    team_limits: Limits = field(default_factory=Limits)
    team_used: Mapping[str, int] = field(default_factory=dict)
