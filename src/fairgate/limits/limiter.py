"""The limiter: one atomic check-and-charge per request, one settle, one failure policy.

    limiter = Limiter(store, fail_open=False, day_zone=ZoneInfo("Europe/Paris"))
    admission = await limiter.admit(demand, now)      # RateLimited / ServiceUnavailable
    try:
        ...                                            # serve the request
    finally:
        await limiter.settle(admission, tokens=used, cost=cost, now=clock.wall())

When the state back end is unavailable (``StateUnavailable``), this module alone
decides: fail closed (default) answers 503 ``ServiceUnavailable`` naming the limit
service; fail open serves the request uncounted. Either way ``on_unavailable``
is called with what happened (``"refused"``, ``"served_without_limits"``,
``"settle_lost"``), so a metric can count it, and the log says so once per outage.

Budgets are guarded against a back end that lost its data (a Redis restarted
without persistence: every budget counter back at zero). Whoever restores the
recorded spend (``fairgate.accounting.budget_keeper``) leaves a mark beside the
counters (``mark_restored``) and hands the limiter its restore
(``guard_budgets``). From then on a request with a budget is admitted only while
the mark is there, checked in the same atomic step as its charges; without it the
request waits for one restore (shared by every request that found the mark gone)
and is tried once more. Without the guard, requests would be admitted on the
empty counters until the next periodic refresh.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, tzinfo
from typing import Literal

from fairgate.core.errors import ServiceUnavailable
from fairgate.core.limits import Limits
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget
from fairgate.limits.charges import Lease, PeriodCharge
from fairgate.limits.demand import Admission, Demand
from fairgate.limits.fairshare_state import Claim, ClaimRequest, UsageCharge
from fairgate.limits.periods import Calendar
from fairgate.limits.plan import Plan, Planner
from fairgate.limits.store import CounterStore, StateUnavailable
from fairgate.limits.subject import Subject
from fairgate.limits.usage import BudgetUsage, Usage

__all__ = ["UNAVAILABLE_MESSAGE", "Limiter", "Outage"]

log = logging.getLogger(__name__)

# what happened to a request while the back end was unavailable, for a metric
Outage = Literal["refused", "served_without_limits", "settle_lost"]

UNAVAILABLE_MESSAGE = (
    "The rate-limit and budget service is unavailable, so the request was not served. "
    "Try again shortly."
)


# A counter no request charges, kept for good: present while the back end keeps the
# budget counters restored into it.
_RESTORED_MARK = PeriodCharge("restored-spend", 0, 1, 4e9, 4e9)


class Limiter:
    """Admits requests against a key's limits and the budgets they fall under.

    ``admit`` raises ``RateLimited`` (429; Retry-After for rate limits, none for a
    spent budget) or ``ServiceUnavailable`` (503, back end down and fail closed).
    ``settle`` never raises but ``CancelledError``: it runs in a ``finally``, and
    what it cannot write is reported through ``on_unavailable`` (the in-flight
    slot then expires by itself on Redis). Cancelling either is safe: the store
    finishes a started settle and gives back a charge whose caller is gone.
    Period counters outlive their period by ``grace`` seconds so that late
    settles still land in them.
    """

    def __init__(
        self,
        store: CounterStore,
        *,
        fail_open: bool = False,
        day_zone: tzinfo = UTC,
        grace: float = 86400.0,
        on_unavailable: Callable[[Outage], None] | None = None,
    ) -> None:
        self._store = store
        self._fail_open = fail_open
        self._planner = Planner(Calendar(day_zone), grace)
        self._on_unavailable = on_unavailable
        self._outage = False
        self._restore: Callable[[float], Awaitable[None]] | None = None
        self._restoring: asyncio.Future[None] | None = None

    def guard_budgets(self, restore: Callable[[float], Awaitable[None]]) -> None:
        """Admit a request with a budget only while the back end holds the mark of
        restored spend; ``restore(now)`` puts the spend and the mark back, raising
        ``StateUnavailable`` when it cannot. Call before the first request."""
        self._restore = restore
        self._planner.require_mark(_RESTORED_MARK.key)

    @property
    def available(self) -> bool:
        """False from a failed call to the back end until the next one that succeeds."""
        return not self._outage

    async def admit(
        self, demand: Demand, now: float, claim: ClaimRequest | None = None
    ) -> Admission:
        """Charge every limit and budget of ``demand`` at once, or refuse it.

        With ``claim``, the fair-share claim is made in the same call to the back
        end, only if every limit was charged (``CounterStore.acquire``): the
        admission's ``claim``. When that call fails, the failure policy decides for
        the limits as without a claim; a request still served gets no claim and
        the error in ``unavailable`` (a request with no limit is always served)."""
        plan = self._planner.plan(demand, now)
        if not plan.charges and claim is None:
            return Admission(lease=None)
        try:
            verdict = await self._store.acquire(plan.charges, now, claim=claim)
            if verdict.refused == plan.mark:
                # the back end lost the restored spend: put it back, then try once more
                await self._restored(now)
                verdict = await self._store.acquire(plan.charges, now, claim=claim)
                if verdict.refused == plan.mark:
                    raise StateUnavailable("the budgets' spend is not restored in the back end")
        except StateUnavailable as exc:
            self._note_outage(exc)
            if not plan.charges:  # no limit to enforce: only the claim is lost
                return Admission(lease=None, unavailable=exc)
            if self._fail_open:
                self._report("served_without_limits")
                return Admission(lease=None, degraded=True, unavailable=exc)
            self._report("refused")
            raise ServiceUnavailable(UNAVAILABLE_MESSAGE, code="limits_unavailable") from exc
        self._note_recovery()
        if verdict.lease is None:
            index = verdict.refused if verdict.refused is not None else 0
            raise plan.refusals[index](verdict.retry_after)
        if not plan.charges:
            return Admission(lease=None, claim=verdict.claim)
        admission = _admission(plan, verdict.lease, verdict.totals)
        admission.claim = verdict.claim
        return admission

    async def _restored(self, now: float) -> None:
        """Run the restore ``guard_budgets`` was given, once for every request that is
        waiting on it; a cancelled caller leaves it running for the others."""
        restore = self._restore
        assert restore is not None  # only a guarded plan has a mark
        task = self._restoring
        if task is None or task.done():
            log.warning("limits: the back end lost the budgets' restored spend; restoring it")
            task = self._restoring = asyncio.ensure_future(restore(now))
        await asyncio.shield(task)

    async def settle(
        self,
        admission: Admission,
        *,
        tokens: int | None,
        cost: Money | None,
        now: float,
        model: str | None = None,
        costs: Mapping[str, Money] | None = None,
        release: Claim | None = None,
        charge: UsageCharge | None = None,
    ) -> bool:
        """Release the in-flight slot and correct tokens and cost with the real usage
        (None: keep the estimate), in the windows and periods the admission charged.
        ``model`` is the model that served the request: a per-model budget of another
        model (a fallback that did not serve) is given its reservation back; None
        charges every budget the cost. ``costs`` splits ``cost`` per model when
        attempts on several models are charged (unanswered ones at their own models'
        prices): a per-model budget is then charged its model's part. A second settle
        of the same admission does nothing.

        ``release`` (a fair-share claim to give back) and ``charge`` (usage to add)
        go in the same call to the back end (``CounterStore.settle``). False when
        that call failed (the slots then expire by themselves, the corrections and
        the usage charge are lost), else True."""
        if admission.settled:
            return True
        admission.settled = True
        lease = admission.lease
        if release is not None and release.lease is None:
            release = None  # a borrowing claim holds nothing
        if lease is None and release is None and charge is None:
            return True
        actual: dict[str, int] = {}
        if tokens is not None:
            used = tokens if tokens > 0 else 0
            for key in admission.tpm_keys:
                actual[key] = used
        if cost is not None:
            spent = cost.micro if cost.micro > 0 else 0
            for key, of in zip(admission.budget_keys, admission.budget_models, strict=True):
                if model is None or of is None:
                    actual[key] = spent
                elif costs is not None:
                    part = costs.get(of)
                    actual[key] = part.micro if part is not None and part.micro > 0 else 0
                else:
                    actual[key] = spent if of == model else 0
        try:
            await self._store.settle(lease, actual, now, release=release, charge=charge)
        except StateUnavailable as exc:
            # the slot then expires by itself (lease TTL); the correction is lost
            self._note_outage(exc)
            if lease is not None:
                self._report("settle_lost")
            return False
        return True

    async def usage(
        self,
        subject: Subject,
        limits: Limits,
        budgets: Sequence[Budget],
        now: float,
        team_limits: Limits | None = None,
    ) -> Usage:
        """What ``subject`` has used of each limit, team total and budget now (nothing
        is charged)."""
        team_limits = team_limits or Limits()
        demand = Demand(subject, limits, "", 1, Money(0), tuple(budgets), team_limits)
        plan = self._planner.plan(demand, now)
        try:
            totals = await self._store.read(plan.charges, now) if plan.charges else ()
        except StateUnavailable as exc:
            self._note_outage(exc)
            raise ServiceUnavailable(UNAVAILABLE_MESSAGE, code="limits_unavailable") from exc
        by_kind = {kind: totals[index] for kind, index in plan.rates.items()}
        spans = [self._planner.budget_counter(b, now) for b, _ in plan.budgets]
        return Usage(
            limits=limits,
            requests_last_minute=by_kind.get("rpm"),
            tokens_last_minute=by_kind.get("tpm"),
            requests_today=by_kind.get("rpd"),
            in_flight=by_kind.get("inflight"),
            team_limits=team_limits,
            team_used={
                kind.removeprefix("team-"): total
                for kind, total in by_kind.items()
                if kind.startswith("team-")
            },
            budgets=tuple(
                BudgetUsage(budget, span, Money(totals[index]), Money(counter.limit))
                for (budget, index), (counter, span) in zip(plan.budgets, spans, strict=True)
            ),
        )

    async def restore(
        self,
        budget: Budget,
        spent: Money,
        now: float,
        *,
        track: float = 0.0,
        uncharged: bool = False,
    ) -> None:
        """Raise ``budget``'s counter for the period holding ``now`` to at least ``spent``
        (spend recorded in the store), so that a restart never hands out a fresh
        allowance; ``track`` and ``uncharged`` as in ``CounterStore.seed``. Raises
        ``StateUnavailable`` when the back end is down."""
        counter, _ = self._planner.budget_counter(budget, now)
        await self._store.seed(counter, spent.micro, now, track=track, uncharged=uncharged)

    async def holds_restored_spend(self, now: float) -> bool:
        """Whether the back end still holds the mark ``mark_restored`` left: False on a fresh
        back end, or one that lost its data since (a Redis restarted without persistence),
        whose budget counters must be restored again. Raises ``StateUnavailable``."""
        (mark,) = await self._store.read([_RESTORED_MARK], now)
        return mark > 0

    async def mark_restored(self, now: float) -> None:
        """Leave the mark ``holds_restored_spend`` looks for. Raises ``StateUnavailable``.

        Its value is new for each restore: a lease taken before it holds the old value,
        so its settle knows the counters it charged were restored since and charges
        them its cost instead of correcting a reservation they never held."""
        await self._store.seed(_RESTORED_MARK, secrets.randbelow(2**52) + 2, now)

    def _report(self, outcome: Outage) -> None:
        if self._on_unavailable is not None:
            self._on_unavailable(outcome)

    def _note_outage(self, exc: StateUnavailable) -> None:
        if not self._outage:
            self._outage = True
            policy = "serving without limits" if self._fail_open else "refusing requests"
            log.error("limits state back end unavailable (%s): %s", policy, exc)

    def _note_recovery(self) -> None:
        if self._outage:
            self._outage = False
            log.warning("limits state back end available again")


def _admission(plan: Plan, lease: Lease, totals: tuple[int, ...]) -> Admission:
    crossed = []
    spent = []
    # past the soft limit, not only crossing it here: a settle charging more than its
    # reservation (a prompt longer than its estimate) or a soft limit lowered below the
    # spend passes it with no admission crossing it (the alerter sends once per period)
    for budget, index in plan.budgets:
        if budget.soft is None:
            continue
        after = totals[index] if index < len(totals) else 0
        if budget.soft.micro <= after:
            crossed.append(budget)
            spent.append(Money(after))
    return Admission(
        lease=lease,
        tpm_keys=plan.tpm_keys,
        budget_keys=plan.budget_keys,
        budget_models=plan.budget_models,
        soft_crossed=tuple(crossed),
        soft_spent=tuple(spent),
    )
