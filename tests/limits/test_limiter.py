"""The limiter over both back ends: what a caller gets, and what the counters keep."""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from fairgate.core.errors import RateLimited, ServiceUnavailable
from fairgate.core.money import Money
from fairgate.limits import (
    Admission,
    Budget,
    CounterStore,
    Demand,
    Increase,
    Limiter,
    Limits,
    Subject,
)
from fairgate.state import MemoryCounterStore, RedisCounterStore

SUBJECT = Subject(key="k1", org="etabA", team="lab-nlp", project="p1")
NEW_YORK = ZoneInfo("America/New_York")
T0 = datetime(2024, 5, 14, 12, 0, tzinfo=UTC).timestamp()


def at(text: str, zone: ZoneInfo = NEW_YORK) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


NO_LIMITS = Limits()


def demand(
    limits: Limits = NO_LIMITS,
    *budgets: Budget,
    tokens: int = 100,
    cost: int = 0,
) -> Demand:
    return Demand(SUBJECT, limits, "llama", tokens, Money(cost), budgets)


def team_budget(cap: int, period: str = "month", **extra: object) -> Budget:
    return Budget("team", "lab-nlp", None, period, Money(cap), **extra)  # type: ignore[arg-type]


async def refused(limiter: Limiter, d: Demand, now: float) -> RateLimited:
    with pytest.raises(RateLimited) as caught:
        await limiter.admit(d, now)
    return caught.value


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"  # nothing listens there any more


async def test_over_rpm_is_429_with_retry_after_naming_the_limit(store: CounterStore) -> None:
    limiter = Limiter(store)
    for i in range(3):
        await limiter.admit(demand(Limits(rpm=3)), T0 + i)
    error = await refused(limiter, demand(Limits(rpm=3)), T0 + 10)
    assert error.status == 429 and error.code == "rpm_limit_exceeded"
    assert "3 requests per minute" in error.message
    assert error.retry_after is not None and 48 <= error.retry_after <= 51
    assert error.headers() == [(b"retry-after", str(math.ceil(error.retry_after)).encode())]


def test_retry_after_is_whole_seconds_never_below_the_wait() -> None:
    def header(wait: float) -> bytes:
        return dict(RateLimited("over", retry_after=wait).headers())[b"retry-after"]

    # a client waiting what it is told must find the window open: 1.0005 s is 2, not 1
    assert header(1.0005) == b"2"
    assert header(3.0) == b"3"
    assert header(0.2) == b"1"
    assert header(0.0) == b"1"


async def test_keys_of_one_team_share_its_totals(store: CounterStore) -> None:
    limiter = Limiter(store)
    totals = Limits(rpm=5, tpm=1_000, max_in_flight=3)
    keys = [Subject(key=f"k{i}", org="etabA", team="lab-nlp") for i in range(5)]
    admitted = []
    # five keys, each without limits of its own, in turn: five requests in all
    for i in range(10):
        try:
            admitted.append(
                await limiter.admit(
                    Demand(keys[i % 5], NO_LIMITS, "m", 10, Money(0), (), totals), T0
                )
            )
        except RateLimited as error:
            assert error.code in {"team_rpm_limit_exceeded", "team_in_flight_limit_exceeded"}
    assert len(admitted) == 3  # in flight binds first: three slots for the team
    for admission in admitted:
        await limiter.settle(admission, tokens=400, cost=None, now=T0 + 1)
    usage = await limiter.usage(keys[0], NO_LIMITS, (), T0 + 1, totals)
    assert usage.team_used == {"rpm": 3, "tpm": 1_200, "inflight": 0}
    # the real tokens (1200) are over the team's 1000: every key of the team waits
    error = await refused(limiter, Demand(keys[4], NO_LIMITS, "m", 1, Money(0), (), totals), T0 + 2)
    assert error.code == "team_tpm_limit_exceeded" and "team 'lab-nlp'" in error.message
    # another team's key is not charged to lab-nlp
    other = Subject(key="k9", org="etabA", team="lab-cv")
    await limiter.admit(Demand(other, NO_LIMITS, "m", 10, Money(0), (), totals), T0 + 2)


async def test_tokens_are_charged_as_estimated_and_corrected_after(store: CounterStore) -> None:
    limiter = Limiter(store)
    limits = Limits(tpm=1_000)
    first = await limiter.admit(demand(limits, tokens=800), T0)
    error = await refused(limiter, demand(limits, tokens=300), T0 + 1)
    assert "1000 tokens per minute" in error.message
    await limiter.settle(first, tokens=100, cost=None, now=T0 + 2)
    second = await limiter.admit(demand(limits, tokens=300), T0 + 3)
    usage = await limiter.usage(SUBJECT, limits, (), T0 + 3)
    assert usage.tokens_last_minute == 400
    # a request far above its estimate is charged in full once known
    await limiter.settle(second, tokens=5_000, cost=None, now=T0 + 4)
    await refused(limiter, demand(limits, tokens=10), T0 + 30)
    assert (await limiter.usage(SUBJECT, limits, (), T0 + 30)).tokens_last_minute == 5_100


async def test_an_estimate_above_the_tpm_limit_passes_only_on_an_empty_window(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    big = demand(Limits(tpm=1_000), tokens=16_384)
    admission = await limiter.admit(big, T0)
    await limiter.settle(admission, tokens=200, cost=None, now=T0 + 1)
    await refused(limiter, big, T0 + 2)  # 200 already in the window


async def test_the_day_ends_at_midnight_in_the_configured_zone(store: CounterStore) -> None:
    limiter = Limiter(store, day_zone=NEW_YORK)
    daily = demand(Limits(rpd=2))
    await limiter.admit(daily, at("2024-01-15T18:59:00"))
    await limiter.admit(daily, at("2024-01-15T19:01:00"))  # midnight UTC has passed
    error = await refused(limiter, daily, at("2024-01-15T23:59:30"))
    assert error.code == "rpd_limit_exceeded" and "America/New_York" in error.message
    assert error.retry_after == pytest.approx(30.0, abs=0.01)
    await limiter.admit(daily, at("2024-01-16T00:00:01"))
    usage = await limiter.usage(SUBJECT, Limits(rpd=2), (), at("2024-01-16T00:00:02"))
    assert usage.requests_today == 1


async def test_in_flight_is_released_by_settle(store: CounterStore) -> None:
    limiter = Limiter(store)
    one = demand(Limits(max_in_flight=1))
    admission = await limiter.admit(one, T0)
    error = await refused(limiter, one, T0)
    assert error.code == "in_flight_limit_exceeded" and error.retry_after
    await limiter.settle(admission, tokens=None, cost=None, now=T0)
    await limiter.admit(one, T0)


async def test_in_flight_is_released_when_the_holder_is_cancelled(store: CounterStore) -> None:
    limiter = Limiter(store)
    one = demand(Limits(max_in_flight=1))
    holding = asyncio.Event()

    async def serve() -> None:
        admission = await limiter.admit(one, T0)
        try:
            holding.set()
            await asyncio.sleep(3600)  # streaming to a client that goes away
        finally:
            await limiter.settle(admission, tokens=None, cost=None, now=T0 + 1)

    task = asyncio.create_task(serve())
    await asyncio.wait_for(holding.wait(), 10)
    await refused(limiter, one, T0 + 1)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await limiter.admit(one, T0 + 2)


async def test_fifty_concurrent_requests_against_a_budget_that_fits_five(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    estimate = 20_000
    budget = team_budget(5 * estimate)
    results = await asyncio.gather(
        *(limiter.admit(demand(Limits(), budget, cost=estimate), T0) for _ in range(50)),
        return_exceptions=True,
    )
    admitted = [r for r in results if isinstance(r, Admission)]
    assert len(admitted) <= 5
    assert all(isinstance(r, (Admission, RateLimited)) for r in results)
    (spent,) = (await limiter.usage(SUBJECT, Limits(), (budget,), T0)).budgets
    assert spent.spent.micro <= budget.max.micro + estimate
    for admission in admitted:
        await limiter.settle(admission, tokens=None, cost=Money(1_000), now=T0 + 5)
    (settled,) = (await limiter.usage(SUBJECT, Limits(), (budget,), T0 + 5)).budgets
    assert settled.spent == Money(1_000 * len(admitted))


async def test_a_spent_budget_is_429_without_retry_after_naming_the_scope(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    budget = team_budget(1_000)
    await limiter.admit(demand(Limits(), budget, cost=1_000), T0)
    error = await refused(limiter, demand(Limits(), budget, cost=1), T0 + 1)
    assert error.code == "budget_exceeded"
    assert "monthly budget of team 'lab-nlp'" in error.message
    assert error.retry_after is None and error.headers() == []


async def test_a_refused_budget_charges_none_of_the_rate_limits(store: CounterStore) -> None:
    limiter = Limiter(store)
    limits = Limits(rpm=10, tpm=10_000, rpd=10, max_in_flight=5)
    spent = team_budget(0)
    await refused(limiter, demand(limits, spent, cost=10), T0)
    usage = await limiter.usage(SUBJECT, limits, (spent,), T0)
    assert (usage.requests_last_minute, usage.tokens_last_minute) == (0, 0)
    assert (usage.requests_today, usage.in_flight) == (0, 0)


async def test_the_correction_lands_in_the_month_that_was_reserved(store: CounterStore) -> None:
    limiter = Limiter(store)
    budget = team_budget(1_000_000)
    january_end = at("2024-01-31T23:59:50", UTC)
    admission = await limiter.admit(demand(Limits(), budget, cost=1_000), january_end)
    await limiter.settle(admission, tokens=None, cost=Money(1_500), now=january_end + 20)
    (january,) = (await limiter.usage(SUBJECT, Limits(), (budget,), january_end + 5)).budgets
    (february,) = (await limiter.usage(SUBJECT, Limits(), (budget,), january_end + 20)).budgets
    assert (january.period.label, january.spent) == ("2024-01", Money(1_500))
    assert (february.period.label, february.spent) == ("2024-02", Money(0))


async def test_a_temporary_increase_holds_until_it_expires(store: CounterStore) -> None:
    limiter = Limiter(store)
    budget = team_budget(1_000, "day", increases=(Increase(Money(1_000), T0 + 100),))
    for i in range(3):  # 0, 600, 1200: the third only fits thanks to the increase
        await limiter.admit(demand(Limits(), budget, cost=600), T0 + i)
    (standing,) = (await limiter.usage(SUBJECT, Limits(), (budget,), T0 + 3)).budgets
    assert (standing.spent, standing.limit) == (Money(1_800), Money(2_000))
    await limiter.admit(demand(Limits(), budget, cost=1), T0 + 99)  # 1800 < 2000
    await refused(limiter, demand(Limits(), budget, cost=1), T0 + 100)


async def test_a_budget_past_its_soft_limit_is_reported_by_every_admission(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    budget = team_budget(10_000, soft=Money(1_500))
    crossed = [
        (await limiter.admit(demand(Limits(), budget, cost=1_000), T0 + i)).soft_crossed
        for i in range(3)
    ]
    assert crossed == [(), (budget,), (budget,)]  # the alerter sends once per period


async def test_a_soft_limit_passed_by_a_settle_is_reported_by_the_next_admission(
    store: CounterStore,
) -> None:
    limiter = Limiter(store)
    budget = team_budget(10_000, soft=Money(1_500))
    first = await limiter.admit(demand(Limits(), budget, cost=500), T0)
    assert first.soft_crossed == ()
    # the real cost is above the reservation (a prompt longer than its estimate)
    await limiter.settle(first, tokens=None, cost=Money(2_000), now=T0 + 1)
    after = await limiter.admit(demand(Limits(), budget, cost=500), T0 + 2)
    assert after.soft_crossed == (budget,) and after.soft_spent == (Money(2_500),)


async def test_restored_spend_is_not_handed_out_again(store: CounterStore) -> None:
    limiter = Limiter(store)
    budget = team_budget(5_000)
    await limiter.restore(budget, Money(5_000), T0)
    await limiter.restore(budget, Money(10), T0)  # never lowers
    await refused(limiter, demand(Limits(), budget, cost=1), T0 + 1)


async def test_settling_twice_corrects_once(store: CounterStore) -> None:
    limiter = Limiter(store)
    admission = await limiter.admit(demand(Limits(tpm=1_000), tokens=500), T0)
    for _ in range(2):
        await limiter.settle(admission, tokens=200, cost=None, now=T0 + 1)
    usage = await limiter.usage(SUBJECT, Limits(tpm=1_000), (), T0 + 1)
    assert usage.tokens_last_minute == 200


async def test_usage_reports_only_what_is_limited(store: CounterStore) -> None:
    limiter = Limiter(store)
    budget = team_budget(9_000, "week")
    await limiter.admit(demand(Limits(rpm=5, max_in_flight=2), budget, cost=300), T0)
    usage = await limiter.usage(SUBJECT, Limits(rpm=5, max_in_flight=2), (budget,), T0 + 1)
    assert usage.requests_last_minute == 1 and usage.in_flight == 1
    assert usage.tokens_last_minute is None and usage.requests_today is None
    (week,) = usage.budgets
    assert (week.spent, week.remaining, week.period.label) == (Money(300), Money(8_700), "2024-W20")


async def test_a_request_without_limits_never_touches_the_back_end() -> None:
    store = RedisCounterStore(dead_url(), timeout=0.2)
    try:
        admission = await Limiter(store).admit(demand(Limits()), T0)
        assert admission.lease is None and not admission.degraded
    finally:
        await store.aclose()


async def test_back_end_down_fails_closed_with_503_by_default() -> None:
    seen: list[str] = []
    store = RedisCounterStore(dead_url(), timeout=0.5)
    limiter = Limiter(store, on_unavailable=seen.append)
    try:
        for _ in range(5):  # the breaker opens on the way; every answer stays the same
            with pytest.raises(ServiceUnavailable) as caught:
                await asyncio.wait_for(limiter.admit(demand(Limits(rpm=5)), T0), 10)
            assert caught.value.status == 503
            assert "rate-limit and budget service is unavailable" in caught.value.message
        with pytest.raises(ServiceUnavailable):
            await limiter.usage(SUBJECT, Limits(rpm=5), (), T0)
    finally:
        await store.aclose()
    assert seen == ["refused"] * 5
    assert store.breaker.state == "open"


async def test_back_end_down_with_fail_open_serves_and_counts() -> None:
    seen: list[str] = []
    store = RedisCounterStore(dead_url(), timeout=0.5)
    limiter = Limiter(store, fail_open=True, on_unavailable=seen.append)
    try:
        admission = await asyncio.wait_for(limiter.admit(demand(Limits(rpm=1)), T0), 10)
        again = await asyncio.wait_for(limiter.admit(demand(Limits(rpm=1)), T0), 10)
        assert admission.degraded and again.degraded and admission.lease is None
        await limiter.settle(admission, tokens=10, cost=Money(1), now=T0)
    finally:
        await store.aclose()
    assert seen == ["served_without_limits"] * 2


async def test_a_settle_the_back_end_cannot_take_is_reported_not_raised() -> None:
    seen: list[str] = []
    admission = await Limiter(MemoryCounterStore()).admit(demand(Limits(rpm=5)), T0)
    store = RedisCounterStore(dead_url(), timeout=0.5)
    try:
        await Limiter(store, on_unavailable=seen.append).settle(
            admission, tokens=1, cost=None, now=T0
        )
    finally:
        await store.aclose()
    assert seen == ["settle_lost"]
