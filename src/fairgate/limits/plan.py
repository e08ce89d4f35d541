"""Turning a demand into counter charges, and a refused charge into the caller's 429.

Order of the charges (the first that does not fit is the one named): the key's
requests per minute, tokens per minute, requests per day, in-flight, then the
same four of its team (all its keys together), then every budget from the widest
scope, then (a plan with a budget) the mark of restored spend. Counter keys (before
the back end's prefix):

    rpm:<key>                          window, 60 s, weight 1
    tpm:<key>                          window, 60 s, weight = estimated tokens
    rpd:<key>:<YYYY-MM-DD>             period, the day in the limiter's zone
    inflight:<key>                     in-flight slots
    team-rpm:<team> … team-inflight:<team>   the same, for the team's totals
    budget:<kind>:<scope>:<model|*>:<period>:<label>   period, UTC, micro-units
    restored-spend                     mark: present while the budgets' spend is restored
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from fairgate.core.errors import RateLimited
from fairgate.core.limits import Limits
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget
from fairgate.limits.charges import (
    Charge,
    Charges,
    InFlightCharge,
    Layout,
    MarkCharge,
    PeriodCharge,
    WindowCharge,
)
from fairgate.limits.demand import Demand
from fairgate.limits.periods import Calendar, PeriodSpan

__all__ = ["Plan", "Planner", "in_flight_refusal"]

_ADJECTIVE = {"day": "daily", "week": "weekly", "month": "monthly"}

Refusal = Callable[[float | None], RateLimited]
_Counter = WindowCharge | PeriodCharge | InFlightCharge  # the charges that count something


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Plan:
    """The charges of one demand (with their layout); ``refusals[i]`` explains a refusal
    of ``charges[i]``."""

    charges: Charges
    refusals: tuple[Refusal, ...]
    tpm_keys: tuple[str, ...]  # the key's and the team's token windows, corrected at settle
    rates: dict[str, int]  # "rpm" … "inflight", "team-rpm" … "team-inflight" → its index
    budgets: tuple[tuple[Budget, int], ...]  # (budget, index of its charge)
    budget_keys: tuple[str, ...]  # the counter key of each of ``budgets``, in their order
    budget_models: tuple[str | None, ...]  # the model of each of ``budgets`` (None: all)
    # the index of the charge that checks the back end still holds the restored budget
    # spend (``MarkCharge``), or -1 (never a refused index): no budget, or no mark asked for
    mark: int = -1


@dataclass(frozen=True, slots=True)
class _Shape:
    """A plan with the request's own amounts left out (tokens and cost at 0): where they
    go, and when it holds (it is rebuilt once one of its periods rolls over)."""

    charges: tuple[Charge, ...]
    layout: Layout
    refusals: tuple[Refusal, ...]
    tpm_keys: tuple[str, ...]
    rates: dict[str, int]
    budgets: tuple[tuple[Budget, int], ...]
    budget_keys: tuple[str, ...]
    budget_models: tuple[str | None, ...]
    tpm: tuple[tuple[int, str, int], ...]  # (index, counter key, limit) of each token window
    # (index, counter key, limit, resets_at, keep_until) of each charge taking the cost
    budget_counters: tuple[tuple[int, str, int, float, float], ...]
    start: float  # it holds for start <= now < end: within every period it has a counter of
    end: float
    cacheable: bool  # False when a budget's cap moves with time (temporary increases)
    mark: int


class Planner:
    """Builds plans; holds the calendars (rate days in ``day_calendar``'s zone,
    budgets in UTC) and how long a period counter outlives its period.

    Most of a plan depends only on who asks under which limits and budgets, and on
    the current periods: its counter keys, caps and refusals. That part is built once
    per (key, team, limits, budgets) and kept until one of its periods rolls over;
    a request then only fills in its own amounts (its token estimate and its cost).
    Budgets with temporary increases are planned afresh each time (their cap moves
    when an increase expires).

    After ``require_mark(key)``, a plan with a budget ends with a ``MarkCharge`` on
    ``key``: the request is not admitted on a back end that lost the restored spend."""

    def __init__(self, day_calendar: Calendar, grace: float, *, cache_size: int = 4096) -> None:
        self._days = day_calendar
        self._utc = Calendar(UTC)
        self._grace = grace
        self._mark: str | None = None
        self._shapes: dict[object, _Shape] = {}
        self._cache_size = cache_size

    def require_mark(self, key: str) -> None:
        """End every plan with a budget with a ``MarkCharge`` on ``key`` from now on."""
        self._mark = key
        self._shapes.clear()  # the plans kept so far have no mark

    def plan(self, demand: Demand, now: float) -> Plan:
        subject = demand.subject
        budgets = demand.budgets
        # Budgets by identity: the entry holds them, so no other object can take their ids
        # while it lives; limits by value (they may be built per request). A demand's memo
        # stands for all of them (``Demand.memo``).
        key: object = demand.memo
        if key is None:
            key = (
                subject.key,
                subject.team,
                demand.limits,
                demand.team_limits,
                *[id(b) for b in budgets],
            )
        shape = self._shapes.get(key)
        if shape is None or not shape.start <= now < shape.end:
            shape = self._shape(demand, now)
            if shape.cacheable:
                if len(self._shapes) >= self._cache_size:
                    self._shapes.clear()
                self._shapes[key] = shape
        charges = list(shape.charges)
        tokens = demand.tokens
        for index, counter, limit in shape.tpm:
            charges[index] = WindowCharge(counter, tokens if tokens < limit else limit, limit)
        micro = demand.cost.micro
        if micro != 0:
            for index, counter, limit, resets_at, keep_until in shape.budget_counters:
                charges[index] = PeriodCharge(counter, micro, limit, resets_at, keep_until, True)
        return Plan(
            Charges(charges, shape.layout),
            shape.refusals,
            shape.tpm_keys,
            shape.rates,
            shape.budgets,
            shape.budget_keys,
            shape.budget_models,
            shape.mark,
        )

    def _shape(self, demand: Demand, now: float) -> _Shape:
        """The plan of ``demand`` at ``now`` with amounts 0 for its tokens and cost, and
        where they go."""
        subject, limits, team_limits = demand.subject, demand.limits, demand.team_limits
        zero = Demand(subject, limits, demand.model, 0, Money(0), demand.budgets, team_limits)
        charges: list[_Counter] = []
        refusals: list[Refusal] = []
        rates: dict[str, int] = {}
        # the key id is used verbatim: it is the only free segment of a rate key
        # (or, for rpd, the one before a fixed-form date), so keys stay unambiguous;
        # a team name holds no ':' either
        team = demand.subject.team
        tpm_keys = tuple(
            key
            for key in (
                self._rates(zero, "", demand.subject.key, demand.limits, now, charges, rates),
                self._rates(zero, "team-", team, demand.team_limits, now, charges, rates),
            )
            if key is not None
        )
        zone = self._days.zone
        refusals.extend(_refusal(kind, charges[i].limit, team, zone) for kind, i in rates.items())
        budgets = self._budget_charges(zero, now, charges, refusals)
        tpm = tuple(
            (index, charge.key, charge.limit)
            for kind, index in rates.items()
            if kind.endswith("tpm") and isinstance(charge := charges[index], WindowCharge)
        )
        # the periods its counters belong to: it holds while ``now`` is in all of them
        spans = [self._utc.span(b.period, now) for b, _ in budgets]
        if any(kind.endswith("rpd") for kind in rates):
            spans.append(self._days.span("day", now))
        planned: list[Charge] = list(charges)
        mark = -1
        if budgets and self._mark is not None:
            mark = len(planned)
            planned.append(MarkCharge(self._mark))
            refusals.append(_unrestored)
        return _Shape(
            charges=tuple(planned),
            layout=Layout.of(planned),
            refusals=tuple(refusals),
            tpm_keys=tpm_keys,
            rates=rates,
            budgets=budgets,
            budget_keys=tuple(charges[i].key for _, i in budgets),
            budget_models=tuple(b.model for b, _ in budgets),
            tpm=tpm,
            budget_counters=tuple(
                (index, c.key, c.limit, c.resets_at, c.keep_until)
                for _, index in budgets
                if isinstance(c := charges[index], PeriodCharge)
            ),
            start=max((span.start for span in spans), default=-math.inf),
            end=min((span.end for span in spans), default=math.inf),
            cacheable=not any(b.increases for b in demand.budgets),
            mark=mark,
        )

    def _rates(
        self,
        demand: Demand,
        kind: str,
        name: str,
        limits: Limits,
        now: float,
        charges: list[_Counter],
        rates: dict[str, int],
    ) -> str | None:
        """Append the charges of ``limits`` for ``name`` (a key, or with ``kind``
        "team-" a team); the key of its token window, if it has one."""
        tpm_key = None
        if limits.rpm is not None:
            rates[f"{kind}rpm"] = len(charges)
            charges.append(WindowCharge(f"{kind}rpm:{name}", 1, limits.rpm))
        if limits.tpm is not None:
            tpm_key = f"{kind}tpm:{name}"
            rates[f"{kind}tpm"] = len(charges)
            # an estimate above the whole limit is charged as the whole limit: it
            # passes on an empty window and its real usage is charged afterwards
            charges.append(WindowCharge(tpm_key, min(demand.tokens, limits.tpm), limits.tpm))
        if limits.rpd is not None:
            day = self._days.span("day", now)
            rates[f"{kind}rpd"] = len(charges)
            charges.append(self._period(f"{kind}rpd:{name}:{day.label}", 1, limits.rpd, day, False))
        if limits.max_in_flight is not None:
            rates[f"{kind}inflight"] = len(charges)
            charges.append(InFlightCharge(f"{kind}inflight:{name}", limits.max_in_flight))
        return tpm_key

    def budget_counter(self, budget: Budget, now: float) -> tuple[PeriodCharge, PeriodSpan]:
        """The counter ``budget`` charges at ``now`` (amount 0), and its period."""
        span = self._utc.span(budget.period, now)
        limit = budget.effective_max(now).micro
        return self._period(budget.counter_key(span.label), 0, limit, span, True), span

    def _budget_charges(
        self, demand: Demand, now: float, charges: list[_Counter], refusals: list[Refusal]
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


def _unrestored(_retry: float | None) -> RateLimited:
    # the limiter restores the spend instead of calling this (``Limiter.admit``)
    raise AssertionError("a missing spend mark is not a refusal to answer")


_CODES = {"rpm": "rpm", "tpm": "tpm", "rpd": "rpd", "inflight": "in_flight"}


def _refusal(kind: str, limit: int, team: str, zone: tzinfo) -> Refusal:
    """The refusal of the rate ``kind`` ("rpm" … "inflight", or "team-rpm" …)."""
    base = kind.removeprefix("team-")
    on_team = base != kind

    def refuse(retry: float | None) -> RateLimited:
        who = f"team '{team}' (all its keys together)" if on_team else "this key"
        if base == "rpm":
            text = f"Rate limit exceeded: {who} may send {limit} requests per minute."
        elif base == "tpm":
            text = f"Rate limit exceeded: {who} may use {limit} tokens per minute."
        elif base == "rpd":
            text = (
                f"Daily request limit reached: {who} may send {limit} requests per day "
                f"(days end at midnight, {zone})."
            )
        else:
            text = f"Too many concurrent requests: {who} may have {limit} in flight at once."
        code = f"{'team_' if on_team else ''}{_CODES[base]}_limit_exceeded"
        return RateLimited(text, code=code, retry_after=retry)

    return refuse


def in_flight_refusal(limit: int) -> Refusal:
    """The refusal of a key at its ``max_in_flight`` (the head gate's too)."""
    return _refusal("inflight", limit, "", UTC)


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
