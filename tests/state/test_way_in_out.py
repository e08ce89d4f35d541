"""A request's way in and way out as one call each, on both back ends: the limits'
check-and-charge with the fair-share claim (``CounterStore.acquire(..., claim=...)``),
and the settle with the slot's release and the usage charge
(``CounterStore.settle(..., release=..., charge=...)``)."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator

import pytest

from fairgate.core.errors import RateLimited, ServiceUnavailable
from fairgate.core.money import Money
from fairgate.limits import (
    Budget,
    Demand,
    InFlightCharge,
    Limiter,
    Limits,
    PeriodCharge,
    Subject,
    WindowCharge,
)
from fairgate.limits.fairshare_state import ClaimRequest, Split, UsageCharge
from fairgate.state import MemoryCounterStore, RedisCounterStore
from redis_keys import delete_prefix

T0 = 1_700_000_040.0
HALF_LIFE = 7 * 86400.0


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def store(
    request: pytest.FixtureRequest,
) -> AsyncIterator[MemoryCounterStore | RedisCounterStore]:
    if request.param == "memory":
        yield MemoryCounterStore()
        return
    url: str = request.getfixturevalue("redis_url")
    prefix = f"fgtest:{uuid.uuid4().hex}:"
    redis_store = RedisCounterStore(url, prefix=prefix, timeout=5.0)  # the machine is shared
    try:
        yield redis_store
    finally:
        await redis_store.aclose()
        await delete_prefix(url, prefix)


def charges(
    rpm: int = 100, slots: int = 10, spend: int = 1000
) -> list[WindowCharge | InFlightCharge | PeriodCharge]:
    return [
        WindowCharge("rpm:k", 1, rpm),
        InFlightCharge("inflight:k", slots),
        PeriodCharge("budget:team:t:*:month:x", 10, spend, T0 + 3600, T0 + 7200),
    ]


async def test_an_admitted_acquisition_claims_in_the_same_step(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    asked = ClaimRequest("b300", "etabA", 2)
    verdicts = [await store.acquire(charges(), T0, claim=asked) for _ in range(3)]
    assert all(v.admitted for v in verdicts)
    claims = [v.claim for v in verdicts]
    assert [c is not None and c.within_share for c in claims] == [True, True, False]
    assert [c.in_flight for c in claims if c is not None] == [0, 1, 2]
    assert await store.in_flight("b300", T0) == {"etabA": 2}
    assert await store.read(charges(), T0) == (3, 3, 30)


async def test_a_refused_limit_claims_nothing(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    asked = ClaimRequest("b300", "etabA", 5)
    assert (await store.acquire(charges(rpm=1), T0, claim=asked)).admitted
    refused = await store.acquire(charges(rpm=1), T0, claim=asked)
    assert not refused.admitted and refused.refused == 0
    assert refused.claim is None
    assert await store.in_flight("b300", T0) == {"etabA": 1}  # the first one's slot only
    # a spent budget refuses the same way
    spent = await store.acquire(charges(rpm=100, spend=15), T0 + 1, claim=asked)
    assert not spent.admitted and spent.refused == 2 and spent.claim is None
    assert await store.in_flight("b300", T0 + 1) == {"etabA": 1}


async def test_concurrent_combined_acquisitions_never_exceed_the_reservation(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    asked = ClaimRequest("b300", "etabA", 4)
    verdicts = await asyncio.gather(
        *(store.acquire(charges(rpm=30, slots=100), T0, claim=asked) for _ in range(60))
    )
    admitted = [v for v in verdicts if v.admitted]
    assert len(admitted) == 30  # the rate limit
    within = [v.claim for v in admitted if v.claim is not None and v.claim.within_share]
    assert len(within) == 4
    assert all(v.claim is None for v in verdicts if not v.admitted)


async def test_a_team_aware_claim_in_the_same_step(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    split = Split("lab-nlp", 1, ("lab-nlp", "lab-vision"))
    asked = ClaimRequest("b300", "etabA", 2, split, "lab-nlp")
    first, second, third = [await store.acquire(charges(), T0, claim=asked) for _ in range(3)]
    assert first.claim is not None and first.claim.within_share and not first.claim.in_org
    assert second.claim is not None and second.claim.within_share and second.claim.in_org
    assert third.claim is not None and not third.claim.within_share
    assert await store.team_in_flight("b300", T0, {"etabA": split.groups}) == {
        "etabA": {"lab-nlp": 2}
    }


async def test_a_reservation_of_zero_borrows(store: MemoryCounterStore | RedisCounterStore) -> None:
    verdict = await store.acquire(charges(), T0, claim=ClaimRequest("b300", "etabB", 0))
    assert verdict.admitted
    assert verdict.claim is not None and not verdict.claim.within_share
    assert verdict.claim.lease is None


async def test_one_settle_gives_everything_back_and_charges_usage(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    verdict = await store.acquire(charges(), T0, claim=ClaimRequest("b300", "etabA", 1))
    assert verdict.lease is not None and verdict.claim is not None
    usage = UsageCharge("b300", "etabA", 2.5, HALF_LIFE, team="lab-nlp")
    actual = {"budget:team:t:*:month:x": 4}
    await store.settle(verdict.lease, actual, T0 + 1, release=verdict.claim, charge=usage)
    assert await store.in_flight("b300", T0 + 1) == {}
    assert await store.read(charges(), T0 + 1) == (1, 0, 4)  # slot back, cost corrected
    assert await store.usage("b300", T0 + 1, HALF_LIFE) == pytest.approx({"etabA": 2.5})
    teams = await store.team_usage("b300", T0 + 1, HALF_LIFE)
    assert teams["etabA"] == pytest.approx({"lab-nlp": 2.5})
    # the slot is free again
    again = await store.acquire(charges(), T0 + 2, claim=ClaimRequest("b300", "etabA", 1))
    assert again.claim is not None and again.claim.within_share


async def test_a_settle_without_a_lease_releases_and_charges(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    verdict = await store.acquire([], T0, claim=ClaimRequest("b300", "etabA", 1))
    assert verdict.claim is not None and verdict.claim.within_share
    usage = UsageCharge("b300", "etabA", 1.0, HALF_LIFE)
    await store.settle(None, {}, T0 + 1, release=verdict.claim, charge=usage)
    assert await store.in_flight("b300", T0 + 1) == {}
    assert await store.usage("b300", T0 + 1, HALF_LIFE) == pytest.approx({"etabA": 1.0})


async def test_a_cancelled_combined_acquisition_leaves_nothing(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    asked = ClaimRequest("b300", "etabA", 3)
    tasks = [asyncio.ensure_future(store.acquire(charges(), T0, claim=asked)) for _ in range(5)]
    await asyncio.sleep(0)  # the calls are on their way
    for task in tasks:
        task.cancel()
    finished = await asyncio.gather(*tasks, return_exceptions=True)
    held = [v for v in finished if not isinstance(v, BaseException)]  # answered before the cancel
    for verdict in held:
        assert verdict.lease is not None
        await store.settle(verdict.lease, {}, T0, release=verdict.claim)
    if isinstance(store, RedisCounterStore):
        await _drain(store)
    assert await store.in_flight("b300", T0) == {}
    # every slot is back (the charges are settled as estimated, as a given-back acquisition is)
    assert (await store.read(charges(), T0))[1] == 0


async def _drain(store: RedisCounterStore) -> None:
    """Wait for the work cancelled callers left (``aclose`` does it, then closes)."""
    while store._pending:
        await asyncio.gather(*store._pending, return_exceptions=True)


async def test_a_cancelled_settle_still_releases_and_charges(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    verdict = await store.acquire(charges(), T0, claim=ClaimRequest("b300", "etabA", 1))
    assert verdict.lease is not None and verdict.claim is not None
    usage = UsageCharge("b300", "etabA", 1.0, HALF_LIFE)
    task = asyncio.ensure_future(
        store.settle(verdict.lease, {}, T0 + 1, release=verdict.claim, charge=usage)
    )
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    if isinstance(store, RedisCounterStore):
        await _drain(store)
    assert await store.in_flight("b300", T0 + 1) == {}
    assert await store.usage("b300", T0 + 1, HALF_LIFE) == pytest.approx({"etabA": 1.0})


SUBJECT = Subject(key="k", org="etabA", team="lab-nlp")


def demand(rpm: int, cap: int) -> Demand:
    budget = Budget("team", "lab-nlp", None, "month", Money(cap))
    return Demand(SUBJECT, Limits(rpm=rpm, max_in_flight=5), "llama", 10, Money(100), (budget,))


async def test_the_limiter_admits_and_claims_in_one_call(
    store: MemoryCounterStore | RedisCounterStore,
) -> None:
    limiter = Limiter(store)
    asked = ClaimRequest("b300", "etabA", 1)
    admission = await limiter.admit(demand(rpm=2, cap=10_000), T0, claim=asked)
    assert admission.claim is not None and admission.claim.within_share
    await limiter.admit(demand(rpm=2, cap=10_000), T0, claim=asked)
    with pytest.raises(RateLimited):
        await limiter.admit(demand(rpm=2, cap=10_000), T0, claim=asked)
    assert await store.in_flight("b300", T0) == {"etabA": 1}
    usage = UsageCharge("b300", "etabA", 0.5, HALF_LIFE)
    assert await limiter.settle(
        admission, tokens=5, cost=Money(40), now=T0 + 1, release=admission.claim, charge=usage
    )
    assert await store.in_flight("b300", T0 + 1) == {}
    assert await store.usage("b300", T0 + 1, HALF_LIFE) == pytest.approx({"etabA": 0.5})


async def test_with_no_limit_the_limiter_still_claims() -> None:
    store = MemoryCounterStore()
    admission = await Limiter(store).admit(
        Demand(SUBJECT, Limits(), "llama", 10, Money(0)), T0, claim=ClaimRequest("p", "etabA", 1)
    )
    assert admission.lease is None
    assert admission.claim is not None and admission.claim.within_share


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{probe.getsockname()[1]}/0"  # nothing listens once closed


async def test_state_down_fail_closed_refuses_and_fail_open_serves_without_a_claim() -> None:
    url = dead_url()
    store = RedisCounterStore(url, timeout=0.5)
    try:
        asked = ClaimRequest("b300", "etabA", 1)
        with pytest.raises(ServiceUnavailable):
            await Limiter(store).admit(demand(rpm=2, cap=10_000), T0, claim=asked)
        served = await Limiter(store, fail_open=True).admit(demand(2, 10_000), T0, claim=asked)
        assert served.degraded and served.claim is None and served.unavailable is not None
        # no limit to enforce: served, and the claim's failure is told (borrow, lowest rank)
        bare = Demand(SUBJECT, Limits(), "llama", 10, Money(0))
        alone = await Limiter(store).admit(bare, T0, claim=asked)
        assert not alone.degraded and alone.claim is None and alone.unavailable is not None
    finally:
        await store.aclose()
