"""Budgets: a cap on what one scope may spend per calendar period, in integer micro-units.

    Budget("team", "lab-nlp", None, "month", max=Money.from_units(100))
        caps every model of team lab-nlp at 100 GPU-hours per UTC month;
    Budget("key", "k1", "llama-3.3-70b", "day", max=Money.from_units(2),
           increases=(Increase(Money.from_units(1), expires_at=t),))
        caps key k1 on one model at 2 GPU-hours a day, 3 until ``t``.

A request falls under every budget of its organisation, team, project, key and
tags, each for all models and for its own model; ``BudgetBook`` finds them by
dictionary look-ups, never by scanning every budget.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import quote

from fairgate.core.money import Money
from fairgate.limits.periods import PeriodKind
from fairgate.limits.subject import ScopeKind, Subject

__all__ = ["Budget", "BudgetBook", "Increase"]


class Increase(NamedTuple):
    """A temporary raise of a budget's cap, whatever the period, until ``expires_at``
    (Unix seconds, exclusive)."""

    amount: Money
    expires_at: float


@dataclass(frozen=True, slots=True)
class Budget:
    """The cap of one scope, for all models (``model`` None) or one model, per period.

    ``max`` and ``soft`` are non-negative; ``soft`` (optional) is where an alert
    is due. The effective cap at a moment is ``max`` plus every increase not yet
    expired. ``ValueError`` on a negative amount.
    """

    scope_kind: ScopeKind
    scope: str
    model: str | None
    period: PeriodKind
    max: Money
    soft: Money | None = None
    increases: tuple[Increase, ...] = ()
    counter_prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        amounts = [self.max, *(i.amount for i in self.increases)]
        if self.soft is not None:
            amounts.append(self.soft)
        if any(a.micro < 0 for a in amounts):
            raise ValueError(f"budget of {self.describe()}: amounts must not be negative")
        model = "*" if self.model is None else quote(self.model, safe="")
        prefix = f"budget:{self.scope_kind}:{quote(self.scope, safe='')}:{model}:{self.period}"
        object.__setattr__(self, "counter_prefix", prefix)

    def effective_max(self, now: float) -> Money:
        """``max`` plus the increases still running at ``now``."""
        if not self.increases:
            return self.max
        extra = sum(i.amount.micro for i in self.increases if now < i.expires_at)
        return Money(self.max.micro + extra)

    def counter_key(self, label: str) -> str:
        """The counter of this budget in the period labelled ``label``."""
        return f"{self.counter_prefix}:{label}"

    def describe(self) -> str:
        """The scope as a caller reads it: ``team 'lab-nlp'`` or ``key 'k1' for model 'm'``."""
        text = f"{self.scope_kind} '{self.scope}'"
        return text if self.model is None else f"{text} for model '{self.model}'"


_MEMO_SIZE = 8192
"""How many (subject, model, fallbacks) a book remembers what applies to."""


class BudgetBook:
    """Every configured budget, indexed by (scope kind, scope name)."""

    def __init__(self, budgets: Iterable[Budget] = ()) -> None:
        self._by_scope: dict[tuple[ScopeKind, str], list[Budget]] = {}
        count = 0
        for budget in budgets:
            self._by_scope.setdefault((budget.scope_kind, budget.scope), []).append(budget)
            count += 1
        self._count = count
        # A book never changes (a reload builds a new one), so what applies to a
        # (subject, model, fallbacks) is worked out once; bounded, cleared when full.
        self._applicable: dict[tuple[Subject, str, tuple[str, ...]], tuple[Budget, ...]] = {}

    def applicable(
        self, subject: Subject, model: str, fallbacks: Collection[str] = ()
    ) -> tuple[Budget, ...]:
        """The budgets a request of ``subject`` for ``model`` falls under, widest scope first.

        ``fallbacks`` are the other models that may serve it: their per-model budgets
        are included too (checked and reserved at admission; settled at the real cost
        only for the model that served, ``Limiter.settle``)."""
        memo = (subject, model, tuple(fallbacks))
        known = self._applicable.get(memo)
        if known is not None:
            return known
        models = {model, *fallbacks}
        found: list[Budget] = []
        for scope in subject.scopes():
            for budget in self._by_scope.get(scope, ()):
                if budget.model is None or budget.model in models:
                    found.append(budget)
        if len(self._applicable) >= _MEMO_SIZE:
            self._applicable.clear()
        applicable = self._applicable[memo] = tuple(found)
        return applicable

    def for_subject(self, subject: Subject) -> tuple[Budget, ...]:
        """Every budget of ``subject``'s scopes, whatever its model, widest scope first."""
        return tuple(b for scope in subject.scopes() for b in self._by_scope.get(scope, ()))

    def all(self) -> tuple[Budget, ...]:
        """Every budget of the book."""
        return tuple(b for budgets in self._by_scope.values() for b in budgets)

    def __len__(self) -> int:
        return self._count
