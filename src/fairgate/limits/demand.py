"""What a request asks the limiter for, and what it holds once admitted."""

from __future__ import annotations

from dataclasses import dataclass, field

from fairgate.core.limits import Limits
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget
from fairgate.limits.charges import Lease
from fairgate.limits.fairshare_state import Claim
from fairgate.limits.store import StateUnavailable
from fairgate.limits.subject import Subject

__all__ = ["Admission", "Demand"]


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Demand:
    """One request at admission: who, under which limits and budgets, and its estimates.

    ``tokens`` is the estimate from ``estimate_tokens`` (>= 1); ``cost`` the
    estimated cost of those tokens under the model's prices (>= 0, zero when the
    model has no price: budgets then still refuse once spent, but do not grow).
    ``budgets`` are the ones the request falls under (``BudgetBook.applicable``).
    ``limits`` bind the key; ``team_limits`` the subject's team, all its keys
    together (charged in the same atomic step, so keys of one team share one
    count on every gateway of the back end).

    ``memo``, when set, is what the planner keys the demand's cached plan shape by
    instead of its subject, limits and budgets (a cheaper look-up): the caller vouches
    that every demand with this memo (compared by identity) has the same subject,
    limits, team limits and budgets.
    """

    subject: Subject
    limits: Limits
    model: str
    tokens: int
    cost: Money
    budgets: tuple[Budget, ...] = ()
    team_limits: Limits = field(default_factory=Limits)
    memo: object | None = field(default=None, compare=False)


@dataclass(slots=True)
class Admission:
    """An admitted request's claim on the counters; give it back to ``Limiter.settle``
    in a ``finally`` (also on error and client disconnect).

    ``lease`` is None when nothing was charged: no limit applied, or the state back
    end was unavailable and the limiter fails open (then ``degraded`` is True).
    ``soft_crossed`` lists the budgets at or past their soft limit once this request's
    reservation was charged (an alert is due, once per budget and period, by whoever
    sends them), and ``soft_spent`` what each of them holds now, reservation included.

    ``claim`` is the fair-share claim made in the same step (``Limiter.admit``
    with a claim), None when none was asked for or the back end failed:
    ``unavailable`` then holds the error (the caller borrows at the lowest rank).
    """

    lease: Lease | None
    tpm_keys: tuple[str, ...] = ()
    budget_keys: tuple[str, ...] = ()
    budget_models: tuple[str | None, ...] = ()  # the model of each budget key (None: all)
    soft_crossed: tuple[Budget, ...] = ()
    soft_spent: tuple[Money, ...] = ()
    degraded: bool = False
    settled: bool = False
    claim: Claim | None = None
    unavailable: StateUnavailable | None = None
