"""The restore mark: how a gateway tells that the back end lost the spend it restored."""

from __future__ import annotations

import asyncio

import pytest

from fairgate.core.errors import RateLimited, ServiceUnavailable
from fairgate.core.money import Money
from fairgate.limits import (
    Budget,
    CounterStore,
    Demand,
    Limiter,
    Limits,
    StateUnavailable,
    Subject,
)

NOW = 1_800_000_000.0


async def test_the_mark_is_absent_on_a_fresh_back_end_and_kept_once_left(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    assert not await limiter.holds_restored_spend(NOW)
    await limiter.restore(Budget("team", "t", None, "month", max=Money(10)), Money(4), NOW)
    assert not await limiter.holds_restored_spend(NOW)  # restoring leaves no mark by itself
    await limiter.mark_restored(NOW)
    assert await limiter.holds_restored_spend(NOW)
    assert await limiter.holds_restored_spend(NOW + 400 * 86400)  # months later still
    await limiter.mark_restored(NOW + 1)  # idempotent
    assert await Limiter(store).holds_restored_spend(NOW)  # another gateway sees it


BUDGET = Budget("team", "t", None, "month", max=Money(10))
SUBJECT = Subject(key="k", org="o", team="t", project="p")


def spend(cost: int, *budgets: Budget, limits: Limits | None = None) -> Demand:
    return Demand(SUBJECT, limits or Limits(), "m", 1, Money(cost), budgets)


class Restore:
    """A restore as the budget keeper runs it: the recorded spend, then the mark."""

    def __init__(self, limiter: Limiter, recorded: Money, *, fails: bool = False) -> None:
        self.limiter, self.recorded, self.fails, self.calls = limiter, recorded, fails, 0

    async def __call__(self, now: float) -> None:
        self.calls += 1
        await asyncio.sleep(0.05)  # the store's read: every request in the burst waits
        if self.fails:
            raise StateUnavailable("the store is down")
        await self.limiter.restore(BUDGET, self.recorded, now)
        await self.limiter.mark_restored(now)


async def test_a_burst_on_a_back_end_that_lost_the_spend_waits_for_one_restore(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    restore = Restore(limiter, Money(7))  # 7 of 10 recorded, lost by the back end
    limiter.guard_budgets(restore)
    outcomes = await asyncio.gather(
        *(limiter.admit(spend(1, BUDGET), NOW) for _ in range(20)), return_exceptions=True
    )
    assert restore.calls == 1
    admitted = [o for o in outcomes if not isinstance(o, BaseException)]
    # the budget admits while spend < 10: three more, not ten on the empty counter
    assert len(admitted) == 3
    assert all(isinstance(o, RateLimited) for o in outcomes if isinstance(o, BaseException))
    assert (await limiter.admit(spend(0), NOW)).lease is None  # nothing to charge: no wait


async def test_a_restore_that_fails_refuses_and_charges_nothing(store: CounterStore) -> None:
    limiter = Limiter(store)
    restore = Restore(limiter, Money(0), fails=True)
    limiter.guard_budgets(restore)
    demand = spend(1, BUDGET, limits=Limits(rpm=100))
    for _ in range(2):
        with pytest.raises(ServiceUnavailable) as caught:
            await limiter.admit(demand, NOW)
        assert caught.value.code == "limits_unavailable"
    assert restore.calls == 2  # each request after a failure tries again
    usage = await limiter.usage(SUBJECT, Limits(rpm=100), [BUDGET], NOW)
    assert usage.requests_last_minute == 0 and usage.budgets[0].spent == Money(0)
    # a request without a budget does not need the spend: served on its rate limit
    assert (await limiter.admit(spend(0, limits=Limits(rpm=100)), NOW)).lease is not None
    assert restore.calls == 2


async def test_a_failed_restore_with_fail_open_serves_uncounted(store: CounterStore) -> None:
    limiter = Limiter(store, fail_open=True)
    limiter.guard_budgets(Restore(limiter, Money(0), fails=True))
    admission = await limiter.admit(spend(1, BUDGET), NOW)
    assert admission.degraded and admission.lease is None


async def test_a_waiting_request_cancelled_leaves_the_restore_to_the_others(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    restore = Restore(limiter, Money(9))
    limiter.guard_budgets(restore)
    gone = asyncio.ensure_future(limiter.admit(spend(1, BUDGET), NOW))
    stays = asyncio.ensure_future(limiter.admit(spend(1, BUDGET), NOW))
    await asyncio.sleep(0.01)
    gone.cancel()
    assert (await stays).lease is not None
    assert restore.calls == 1 and gone.cancelled()
    assert await limiter.holds_restored_spend(NOW)
