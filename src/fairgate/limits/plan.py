"""Turning a demand into counter charges, and a refused charge into the caller's 429.

Order of the charges (the first that does not fit is the one named): requests per
minute, tokens per minute, requests per day, in-flight, then every budget from
the widest scope. Counter keys (before the back end's prefix):

    rpm:<key>                          window, 60 s, weight 1
    tpm:<key>                          window, 60 s, weight = estimated tokens
    rpd:<key>:<YYYY-MM-DD>             period, the day in the limiter's zone
    inflight:<key>                     in-flight slots
    budget:<kind>:<scope>:<model|*>:<period>:<label>   period, UTC, micro-units
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from fairgate.core.errors import RateLimited
from fairgate.limits.budgets import Budget
from fairgate.limits.charges import Charge, InFlightCharge, PeriodCharge, WindowCharge
from fairgate.limits.demand import Demand
from fairgate.limits.periods import Calendar, PeriodSpan

__all__ = ["Plan", "Planner", "in_flight_refusal"]

_ADJECTIVE = {"day": "daily", "week": "weekly", "month": "monthly"}

Refusal = Callable[[float | None], RateLimited]


@dataclass(frozen=True, slots=True)
class Plan:
    """The charges of one demand; ``refusals[i]`` explains a refusal of ``charges[i]``."""

    charges: tuple[Charge, ...]
    refusals: tuple[Refusal, ...]
    tpm_key: str | None
    rates: dict[str, int]  # "rpm" | "tpm" | "rpd" | "inflight" → index of its charge
    budgets: tuple[tuple[Budget, int], ...]  # (budget, index of its charge)


class Planner:
    """Builds plans; holds the calendars (rate days in ``day_calendar``'s zone,
    budgets in UTC) and how long a period counter outlives its period."""

    def __init__(self, day_calendar: Calendar, grace: float) -> None:
        self._days = day_calendar
        self._utc = Calendar(UTC)
        self._grace = grace

    def plan(self, demand: Demand, now: float) -> Plan:
        charges: list[Charge] = []
        refusals: list[Refusal] = []
        # the key id is used verbatim: it is the only free segment of a rate key
        # (or, for rpd, the one before a fixed-form date), so keys stay unambiguous
        limits, key = demand.limits, demand.subject.key
        tpm_key = None
        rates: dict[str, int] = {}
        if limits.rpm is not None:
            rates["rpm"] = len(charges)
            charges.append(WindowCharge(f"rpm:{key}", 1, limits.rpm))
            refusals.append(_rpm_refusal(limits.rpm))
        if limits.tpm is not None:
            tpm_key = f"tpm:{key}"
            rates["tpm"] = len(charges)
            # an estimate above the whole limit is charged as the whole limit: it
            # passes on an empty window and its real usage is charged afterwards
            charges.append(WindowCharge(tpm_key, min(demand.tokens, limits.tpm), limits.tpm))
            refusals.append(_tpm_refusal(limits.tpm))
        if limits.rpd is not None:
            day = self._days.span("day", now)
            rates["rpd"] = len(charges)
            charges.append(self._period(f"rpd:{key}:{day.label}", 1, limits.rpd, day, False))
            refusals.append(_rpd_refusal(limits.rpd, self._days.zone))
        if limits.max_in_flight is not None:
            rates["inflight"] = len(charges)
            charges.append(InFlightCharge(f"inflight:{key}", limits.max_in_flight))
            refusals.append(in_flight_refusal(limits.max_in_flight))
        budgets = self._budget_charges(demand, now, charges, refusals)
        return Plan(tuple(charges), tuple(refusals), tpm_key, rates, budgets)

    def budget_counter(self, budget: Budget, now: float) -> tuple[PeriodCharge, PeriodSpan]:
        """The counter ``budget`` charges at ``now`` (amount 0), and its period."""
        span = self._utc.span(budget.period, now)
        limit = budget.effective_max(now).micro
        return self._period(budget.counter_key(span.label), 0, limit, span, True), span

    def _budget_charges(
        self, demand: Demand, now: float, charges: list[Charge], refusals: list[Refusal]
    ) -> tuple[tuple[Budget, int], ...]:
        placed: list[tuple[Budget, int]] = []
        index_of: dict[str, int] = {}
        for budget in demand.budgets:
            span = self._utc.span(budget.period, now)
            charge = self._period(
                budget.counter_key(span.label),
                demand.cost.micro,
                budget.effective_max(now).micro,
                span,
                True,
            )
            index = index_of.get(charge.key)
            if index is None:
                index = index_of[charge.key] = len(charges)
                placed.append((budget, index))
                charges.append(charge)
                refusals.append(_budget_refusal(budget, span))
            elif charge.limit < charges[index].limit:
                # the same budget listed twice shares one counter: keep the stricter cap
                placed[[i for _, i in placed].index(index)] = (budget, index)
                charges[index] = charge
                refusals[index] = _budget_refusal(budget, span)
        return tuple(placed)

    def _period(
        self, key: str, amount: int, limit: int, span: PeriodSpan, overdraft: bool
    ) -> PeriodCharge:
        return PeriodCharge(key, amount, limit, span.end, span.end + self._grace, overdraft)


# Messages are formatted only when a request is refused, never on the way through.


def _rpm_refusal(rpm: int) -> Refusal:
    return lambda retry: RateLimited(
        f"Rate limit exceeded: this key may send {rpm} requests per minute.",
        code="rpm_limit_exceeded",
        retry_after=retry,
    )


def _tpm_refusal(tpm: int) -> Refusal:
    return lambda retry: RateLimited(
        f"Rate limit exceeded: this key may use {tpm} tokens per minute.",
        code="tpm_limit_exceeded",
        retry_after=retry,
    )


def _rpd_refusal(rpd: int, zone: tzinfo) -> Refusal:
    return lambda retry: RateLimited(
        f"Daily request limit reached: this key may send {rpd} requests per day "
        f"(days end at midnight, {zone}).",
        code="rpd_limit_exceeded",
        retry_after=retry,
    )


def in_flight_refusal(limit: int) -> Refusal:
    return lambda retry: RateLimited(
        f"Too many concurrent requests: this key may have {limit} in flight at once.",
        code="in_flight_limit_exceeded",
        retry_after=retry,
    )


def _budget_refusal(budget: Budget, span: PeriodSpan) -> Refusal:
    def refuse(_retry: float | None) -> RateLimited:
        reset = datetime.fromtimestamp(span.end, UTC).strftime("%Y-%m-%d %H:%M UTC")
        # waiting does not help until the period rolls over: no Retry-After
        return RateLimited(
            f"Budget spent: the {_ADJECTIVE[budget.period]} budget of {budget.describe()} "
            f"is used up until {reset}.",
            code="budget_exceeded",
            retry_after=None,
        )

    return refuse
