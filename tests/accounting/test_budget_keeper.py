"""The budget keeper: recorded spend back in the counters, once per budget, and again
after the state back end lost it (a Redis restarted without persistence)."""

from __future__ import annotations

from datetime import timedelta

from fairgate.accounting import StoreUsageWriter
from fairgate.accounting.alerts import Alerter
from fairgate.accounting.budget_keeper import BudgetKeeper
from fairgate.core.money import Money
from fairgate.limits import Budget, BudgetBook, Limiter, Limits
from fairgate.limits.subject import Subject
from fairgate.state import MemoryCounterStore
from fairgate.store import Store
from store.backends import FakeClock

from .samples import DAY0, record

NOW = (DAY0 + timedelta(days=2)).timestamp()
TEAM = Budget("team", "a1", None, "month", max=Money(1))
KEY = Budget("key", "k-1", None, "month", max=Money(1))
SUBJECT = Subject("k-1", "A", "a1", None, ())


async def _spent(limiter: Limiter, budgets: tuple[Budget, ...]) -> list[int]:
    usage = await limiter.usage(SUBJECT, Limits(), budgets, NOW)
    return [b.spent.micro for b in usage.budgets]


async def test_recorded_spend_is_restored_once_and_again_after_the_back_end_lost_it(
    store: Store,
) -> None:
    await StoreUsageWriter(store).write([record(cost_micro=300), record(cost_micro=200)])
    books = [BudgetBook([TEAM])]

    async def read() -> BudgetBook:
        return books[-1]

    clock = FakeClock(NOW)
    state = MemoryCounterStore()
    limiter = Limiter(state)
    alerter = Alerter(store, webhook=None, smtp=None, clock=clock)
    keeper = BudgetKeeper(read=read, limiter=limiter, store=store, clock=clock, alerter=alerter)
    assert keeper.on_soft_limit is None  # no channel configured: nothing to tell
    await keeper.start()
    assert keeper.book is books[-1]
    assert await _spent(limiter, (TEAM,)) == [500]

    # a reload restores nothing twice; a budget seen for the first time gets its spend
    await StoreUsageWriter(store).write([record(cost_micro=50)])
    books.append(BudgetBook([TEAM, KEY]))
    await keeper.load()
    assert await _spent(limiter, (TEAM, KEY)) == [500, 550]

    # the back end lost everything: the next load restores every budget again
    keeper_state = MemoryCounterStore()
    lost = Limiter(keeper_state)
    again = BudgetKeeper(read=read, limiter=lost, store=store, clock=clock, alerter=alerter)
    again.book = keeper.book  # as if it had loaded before the loss
    await again.load()
    assert await _spent(lost, (TEAM, KEY)) == [550, 550]
