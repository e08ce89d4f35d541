"""The budget keeper: recorded spend back in the counters, once per budget, and again
after the state back end lost it (a Redis restarted without persistence)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from fairgate.accounting import StoreUsageWriter
from fairgate.accounting.alerts import Alerter
from fairgate.accounting.budget_keeper import BudgetKeeper
from fairgate.accounting.restore import spent_in_period
from fairgate.core.errors import RateLimited
from fairgate.core.money import Money
from fairgate.limits import Budget, BudgetBook, Demand, Limiter, Limits
from fairgate.limits.subject import Subject
from fairgate.state import MemoryCounterStore, RedisCounterStore
from fairgate.store import Store
from redis_keys import delete_prefix
from store.backends import FakeClock

from .samples import DAY0, record

NOW = (DAY0 + timedelta(days=2)).timestamp()
TEAM = Budget("team", "a1", None, "month", max=Money(1))
KEY = Budget("key", "k-1", None, "month", max=Money(1))
TEAM_CAP = Budget("team", "a1", None, "month", max=Money(1_000))
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


def _keeper(store: Store, state: RedisCounterStore, books: list[BudgetBook]) -> BudgetKeeper:
    async def read() -> BudgetBook:
        return books[-1]

    clock = FakeClock(NOW)
    alerter = Alerter(store, webhook=None, smtp=None, clock=clock)
    limiter = Limiter(state)
    return BudgetKeeper(read=read, limiter=limiter, store=store, clock=clock, alerter=alerter)


def _demand(cost: int) -> Demand:
    return Demand(SUBJECT, Limits(), "llama-70b", 1, Money(cost), (TEAM_CAP,))


@pytest.mark.redis
async def test_a_budget_new_to_two_gateways_on_one_redis_keeps_the_spend_of_both(
    store: Store, redis_url: str
) -> None:
    """A budget created in the middle of its period reaches the gateways sharing one Redis
    at their own refreshes. Gateway A saw it first, seeded its counter with the recorded
    spend (500) and admitted a request reserving 300; meanwhile gateway B, not yet knowing
    the budget, served 200 uncharged and recorded them. B's seed raised the counter to the
    larger of 800 (A's seed and reservation) and 700 (recorded): B's 200 were lost, the
    counter ended 200 below the recorded spend, and a request of 150 was admitted past
    the cap of 1,000."""
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    states = [RedisCounterStore(redis_url, prefix=prefix, timeout=5.0) for _ in range(2)]
    try:
        await StoreUsageWriter(store).write([record(cost_micro=500)])
        books_a, books_b = [BudgetBook()], [BudgetBook()]
        a, b = _keeper(store, states[0], books_a), _keeper(store, states[1], books_b)
        await a.start()
        await b.start()

        books_a.append(BudgetBook([TEAM_CAP]))
        await a.load()  # A sees the new budget first
        admitted = await a._limiter.admit(_demand(300), NOW)
        assert admitted.lease is not None
        await StoreUsageWriter(store).write([record(cost_micro=200)])  # B, uncharged

        books_b.append(BudgetBook([TEAM_CAP]))
        await b.load()  # B sees it one refresh later
        await a._limiter.settle(admitted, tokens=1, cost=Money(300), now=NOW)
        await StoreUsageWriter(store).write([record(cost_micro=300)])

        recorded = (await spent_in_period(store, TEAM_CAP, NOW)).micro
        assert recorded == 1_000
        assert await _spent(b._limiter, (TEAM_CAP,)) == [recorded]
        with pytest.raises(RateLimited):  # the cap is spent
            await b._limiter.admit(_demand(150), NOW)
    finally:
        for state in states:
            await state.aclose()
        await delete_prefix(redis_url, prefix)
