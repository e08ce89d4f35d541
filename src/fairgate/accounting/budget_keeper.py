"""The budget book the request path reads, kept current: loaded at start-up, refreshed
every ``state.budget_refresh``, with each budget's counter raised to its recorded spend
whenever the state back end has not seen it (start-up, a new budget, a Redis that lost
its data); and the soft-limit alert a reservation's crossing raises. A request that
finds the back end lost its data does not wait for the next refresh: the limiter runs
the restore at once (``Limiter.guard_budgets``).

    keeper = BudgetKeeper(read=tenancy.budgets.book, limiter=..., store=..., clock=...)
    await keeper.start()          # serve anyway if the state back end is down
    book = keeper.book            # what the limit stage reads, per request
    task = create_task(keeper.run(interval))
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from fairgate.accounting.alerts import Alerter
from fairgate.accounting.restore import restore_spend
from fairgate.core.clock import Clock
from fairgate.core.errors import StoreUnavailable
from fairgate.core.money import Money
from fairgate.limits import Budget, BudgetBook, Calendar, Limiter, StateUnavailable
from fairgate.store import Store

__all__ = ["BudgetKeeper"]

log = logging.getLogger("fairgate.accounting")


class BudgetKeeper:
    """Holds the current ``BudgetBook`` (``book``) and keeps the counters behind it true."""

    def __init__(
        self,
        *,
        read: Callable[[], Awaitable[BudgetBook]],
        limiter: Limiter,
        store: Store,
        clock: Clock,
        alerter: Alerter,
        refresh: float = 10.0,
    ) -> None:
        self._read = read
        # how long the back end keeps the total a budget's counter was seeded with: past
        # one refresh, every gateway has seen a new budget (see ``load``)
        self._track = 2 * refresh
        self._running = False  # whether a book was in place (requests served) before
        self._limiter = limiter
        self._store = store
        self._clock = clock
        self._alerter = alerter
        self._calendar = Calendar()  # budgets run in UTC periods
        self.book = BudgetBook()
        # a request that finds the restored spend gone waits for this to put it back
        limiter.guard_budgets(self._restore_now)

    def current(self) -> BudgetBook:
        return self.book

    @property
    def on_soft_limit(self) -> Callable[[Budget, float, Money], None] | None:
        """What the limit stage calls when a reservation crossed a soft limit; None when no
        alert channel is configured (nothing to tell)."""
        return self.soft_limit_crossed if self._alerter.enabled else None

    def soft_limit_crossed(self, budget: Budget, now: float, spent: Money) -> None:
        span = self._calendar.span(budget.period, now)
        self._alerter.soft_limit_crossed(
            budget, span.label, span.end, spent, budget.effective_max(now)
        )

    async def start(self) -> None:
        """The first load. With the state back end down the book is read anyway (limits
        fail closed or open as configured) and the first refresh that reaches the back
        end restores the spend."""
        try:
            await self.load()
        except StateUnavailable as exc:
            log.error("budgets: state back end unavailable, spend not restored yet: %s", exc)
            self.book = await self._read()
            self._running = True

    async def load(self) -> None:
        """Read every budget from the store and raise the counters of the ones not seen
        before to their recorded spend: all of them when the state back end holds no
        restored spend (start-up, or a Redis restarted without persistence).

        A budget new to a gateway that was already running was not charged by its
        requests until now, while other gateways on the same back end may have seen it
        and charged it since: its seed adds the spend recorded since the last seed
        rather than taking the larger of counter and recorded spend, which would lose
        this gateway's uncharged spend whenever the counter holds reservations not yet
        recorded (``CounterStore.seed``). Left out: what this gateway had in flight, or
        queued in its recorder, at the last seed of the budget."""
        book = await self._read()
        now = self._clock.wall()
        everything = not await self._limiter.holds_restored_spend(now)
        known = set() if everything else {b.counter_prefix for b in self.book.all()}
        fresh = [b for b in book.all() if b.counter_prefix not in known]
        raised = await restore_spend(
            self._store, self._limiter, fresh, now,
            track=self._track, uncharged=self._running and not everything,
        )  # fmt: skip
        self._running = True
        if everything:
            # only after restoring every budget: marking after a partial restore could
            # cover counters the back end lost since the check above
            await self._limiter.mark_restored(now)
        if raised:
            log.info("budgets: spend restored from the store for %d budget(s)", raised)
        self.book = book

    async def _restore_now(self, now: float) -> None:
        """What the limiter runs when a request found the restored spend gone; raises
        ``StateUnavailable`` when the store or the back end cannot answer."""
        try:
            await self.load()
        except StoreUnavailable as exc:
            raise StateUnavailable(f"the recorded spend could not be read: {exc}") from exc

    async def run(self, interval: float) -> None:
        """Reload every ``interval`` seconds until cancelled; a failed reload keeps the
        previous book."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.load()
            except (StoreUnavailable, StateUnavailable) as exc:
                log.warning("budgets: refresh failed, keeping the previous ones: %s", exc)
