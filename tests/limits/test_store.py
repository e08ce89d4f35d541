"""Conformance suite of the CounterStore protocol: memory and Redis pass the same tests."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from fairgate.limits import CounterStore, InFlightCharge, MarkCharge, PeriodCharge, WindowCharge

T0 = 1_700_000_040.0  # a multiple of 60: windows and granules start here


def rpm(limit: int, key: str = "rpm:k") -> WindowCharge:
    return WindowCharge(key, 1, limit)


def day(key: str, amount: int, limit: int, *, overdraft: bool = False) -> PeriodCharge:
    return PeriodCharge(key, amount, limit, T0 + 3600, T0 + 7200, overdraft)


def busiest_minute(times: list[float], window: float = 60.0) -> int:
    """Most events inside any closed interval [a, a + window]."""
    ordered = sorted(times)
    return max(
        (sum(1 for u in ordered if t <= u <= t + window) for t in ordered),
        default=0,
    )


async def test_burst_at_a_window_edge_does_not_pass_twice(store: CounterStore) -> None:
    edge = T0 + 59.5
    first = [await store.acquire([rpm(10)], edge) for _ in range(10)]
    assert all(v.admitted for v in first)
    # a fixed window would open again at T0 + 60: a sliding one must not
    second = [await store.acquire([rpm(10)], edge + 1.0) for _ in range(10)]
    assert not any(v.admitted for v in second)
    assert second[0].refused == 0
    assert second[0].retry_after is not None
    # the burst leaves the count 60 s (plus at most one granule) after it was charged
    assert 58.5 <= second[0].retry_after <= 60.5
    later = edge + 1.0 + second[0].retry_after
    assert (await store.acquire([rpm(10)], later)).admitted


async def test_no_sixty_seconds_ever_hold_more_than_the_limit(store: CounterStore) -> None:
    admitted: list[float] = []
    # bursts at the ends and starts of minutes, and a steady trickle in between
    moments = [T0 + m * 60 + d for m in range(4) for d in (-0.2, -0.1, 0.0, 0.1, 0.2)]
    moments += [T0 + s * 0.7 for s in range(0, 340)]
    for now in sorted(moments):
        for _ in range(3):
            if (await store.acquire([rpm(10)], now)).admitted:
                admitted.append(now)
    assert len(admitted) >= 30  # the limit was reached again and again
    assert busiest_minute(admitted) <= 10


async def test_window_weight_is_refunded_and_excess_is_charged(store: CounterStore) -> None:
    tpm = WindowCharge("tpm:k", 800, 1000)
    first = await store.acquire([tpm], T0)
    assert first.lease is not None and first.totals == (800,)
    assert not (await store.acquire([WindowCharge("tpm:k", 300, 1000)], T0 + 1)).admitted
    await store.settle(first.lease, {"tpm:k": 100}, T0 + 2)  # used 100 of 800
    assert await store.read([tpm], T0 + 2) == (100,)
    second = await store.acquire([WindowCharge("tpm:k", 300, 1000)], T0 + 3)
    assert second.lease is not None
    await store.settle(second.lease, {"tpm:k": 900}, T0 + 50)  # 600 more than estimated
    assert await store.read([tpm], T0 + 50) == (1000,)
    # the excess was charged when it became known: it outlives the reservation's bucket
    assert await store.read([tpm], T0 + 80) == (600,)
    assert await store.read([tpm], T0 + 115) == (0,)


async def test_a_weight_above_the_limit_never_fits(store: CounterStore) -> None:
    verdict = await store.acquire([WindowCharge("tpm:k", 2000, 1000)], T0)
    assert not verdict.admitted
    assert verdict.retry_after == 60.0


async def test_period_counter_refuses_until_it_resets(store: CounterStore) -> None:
    assert (await store.acquire([day("rpd:k:d1", 1, 2)], T0)).admitted
    assert (await store.acquire([day("rpd:k:d1", 1, 2)], T0 + 1)).admitted
    refused = await store.acquire([day("rpd:k:d1", 1, 2)], T0 + 600)
    assert refused.refused == 0
    assert refused.retry_after == pytest.approx(3000.0, abs=0.01)
    # the next period is another counter
    assert (await store.acquire([day("rpd:k:d2", 1, 2)], T0 + 3601)).admitted


async def test_overdraft_admits_while_below_and_stops_once_spent(store: CounterStore) -> None:
    results = [
        (await store.acquire([day("budget:b", 10, 25, overdraft=True)], T0 + i)).admitted
        for i in range(5)
    ]
    assert results == [True, True, True, False, False]  # 0, 10, 20 < 25; 30 is spent
    assert await store.read([day("budget:b", 0, 25)], T0 + 5) == (30,)


async def test_in_flight_slot_is_held_until_settled(store: CounterStore) -> None:
    slot = InFlightCharge("inflight:k", 2)
    a = await store.acquire([slot], T0)
    b = await store.acquire([slot], T0)
    refused = await store.acquire([slot], T0)
    assert a.lease and b.lease and not refused.admitted
    assert refused.retry_after is not None and refused.retry_after > 0
    assert await store.read([slot], T0) == (2,)
    await store.settle(a.lease, {}, T0 + 1)
    assert await store.read([slot], T0 + 1) == (1,)
    assert (await store.acquire([slot], T0 + 1)).admitted


async def test_a_mark_refuses_until_it_is_left_and_charges_nothing(store: CounterStore) -> None:
    charges = [rpm(100), day("budget:b", 10, 100, overdraft=True), MarkCharge("restored")]
    refused = await store.acquire(charges, T0)
    assert refused.refused == 2 and refused.lease is None
    assert await store.read(charges[:2], T0) == (0, 0)  # nothing charged
    await store.seed(day("restored", 0, 1), 1, T0)
    admitted = await store.acquire(charges, T0)
    assert admitted.lease is not None and admitted.totals == (1, 10, 1)
    await store.settle(admitted.lease, {"budget:b": 4}, T0 + 1)
    assert await store.read(charges[:2], T0 + 1) == (1, 4)
    assert (await store.acquire(charges, T0 + 1)).admitted  # settling left the mark


async def test_a_mark_is_gone_once_its_counter_expires(store: CounterStore) -> None:
    await store.seed(PeriodCharge("restored", 0, 1, T0 + 1, T0 + 1), 1, T0)  # kept 1 s
    assert (await store.acquire([MarkCharge("restored")], T0)).admitted
    await asyncio.sleep(1.1)  # Redis expires it by its own clock
    assert (await store.acquire([MarkCharge("restored")], T0 + 1.1)).refused == 0


async def test_all_or_nothing_across_counters(store: CounterStore) -> None:
    charges = [
        rpm(100),
        WindowCharge("tpm:k", 50, 1000),
        InFlightCharge("inflight:k", 5),
        day("budget:spent", 10, 0, overdraft=True),  # a cap of zero: always spent
    ]
    verdict = await store.acquire(charges, T0)
    assert verdict.refused == 3
    assert verdict.retry_after is not None
    assert await store.read(charges, T0) == (0, 0, 0, 0)


async def test_the_first_refusing_counter_is_named(store: CounterStore) -> None:
    await store.acquire([day("rpd:x", 1, 1)], T0)
    charges = [rpm(5), day("rpd:x", 1, 1), InFlightCharge("inflight:x", 0)]
    assert (await store.acquire(charges, T0)).refused == 1


async def test_admitted_totals_are_the_counts_after_the_charge(store: CounterStore) -> None:
    charges = [rpm(10), WindowCharge("tpm:k", 40, 100), day("d", 7, 100), InFlightCharge("f", 3)]
    await store.acquire(charges, T0)
    verdict = await store.acquire(charges, T0 + 1)
    assert verdict.totals == (2, 80, 14, 2)


async def test_fifty_concurrent_acquisitions_against_room_for_five(store: CounterStore) -> None:
    estimate, cap = 1_000, 5_000
    charge = day("budget:team", estimate, cap, overdraft=True)
    verdicts = await asyncio.gather(*(store.acquire([charge], T0) for _ in range(50)))
    passed = sum(v.admitted for v in verdicts)
    assert passed == 5
    (spent,) = await store.read([charge], T0)
    assert spent <= cap + estimate


async def test_fifty_concurrent_slots_against_a_limit_of_five(store: CounterStore) -> None:
    slot = InFlightCharge("inflight:k", 5)
    verdicts = await asyncio.gather(*(store.acquire([slot, rpm(1000)], T0) for _ in range(50)))
    assert sum(v.admitted for v in verdicts) == 5
    assert await store.read([slot, rpm(1000)], T0) == (5, 5)


async def test_correction_lands_in_the_period_it_was_charged_in(store: CounterStore) -> None:
    monday = PeriodCharge("budget:b:2023-11-13", 500, 10_000, T0 + 60, T0 + 86_400, True)
    tuesday = PeriodCharge("budget:b:2023-11-14", 0, 10_000, T0 + 86_460, T0 + 2 * 86_400, True)
    verdict = await store.acquire([monday], T0)
    assert verdict.lease is not None
    await store.settle(verdict.lease, {monday.key: 1_200}, T0 + 120)  # the day has rolled over
    assert await store.read([monday, tuesday], T0 + 120) == (1_200, 0)


async def test_seed_raises_a_counter_and_never_lowers_it(store: CounterStore) -> None:
    counter = day("budget:restored", 0, 1_000, overdraft=True)
    await store.seed(counter, 996, T0)
    await store.seed(counter, 400, T0)
    assert await store.read([counter], T0) == (996,)
    charge = day("budget:restored", 5, 1_000, overdraft=True)
    assert (await store.acquire([charge], T0)).admitted  # 996 < 1000
    assert not (await store.acquire([charge], T0)).admitted  # 1001: spent


async def test_unknown_counters_read_zero(store: CounterStore) -> None:
    counters = [rpm(1, "rpm:nobody"), day("d:nobody", 0, 1), InFlightCharge("f:nobody", 1)]
    assert await store.read(counters, T0) == (0, 0, 0)
    assert await store.read([], T0) == ()


async def test_the_same_counter_twice_is_a_programming_error(store: CounterStore) -> None:
    with pytest.raises(ValueError, match="same counter"):
        await store.acquire([rpm(5), rpm(5)], T0)


async def test_an_empty_acquisition_is_admitted(store: CounterStore) -> None:
    verdict = await store.acquire([], T0)
    assert verdict.lease is not None and verdict.totals == ()
    await store.settle(verdict.lease, {}, T0)


async def eventually_zero(store: CounterStore, counter: InFlightCharge) -> int:
    """Slots held once the work of cancelled callers has finished (bounded wait)."""
    for _ in range(200):
        (held,) = await store.read([counter], T0)
        if held == 0:
            return 0
        await asyncio.sleep(0.05)
    return held


@pytest.mark.parametrize("spins", [0, 1, 2, 3, 5, 8])
async def test_a_cancelled_acquisition_leaves_nothing_charged(
    store: CounterStore, spins: int
) -> None:
    slot = InFlightCharge("inflight:k", 1)
    task = asyncio.create_task(store.acquire([slot], T0))
    for _ in range(spins):  # cancel at different points of the round trip
        await asyncio.sleep(0)
    task.cancel()
    try:
        verdict = await task
    except asyncio.CancelledError:
        pass
    else:  # it finished before the cancel: then the caller owns the lease
        assert verdict.lease is not None
        await store.settle(verdict.lease, {}, T0)
    assert await eventually_zero(store, slot) == 0


@pytest.mark.parametrize("spins", [0, 1, 2, 3])
async def test_a_cancelled_settle_still_gives_the_slot_back(
    store: CounterStore, spins: int
) -> None:
    slot = InFlightCharge("inflight:k", 1)
    verdict = await store.acquire([slot], T0)
    assert verdict.lease is not None
    task = asyncio.create_task(store.settle(verdict.lease, {}, T0))
    await asyncio.sleep(0)  # the settle has started: a finally block that is cancelled
    for _ in range(spins):
        await asyncio.sleep(0)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert await eventually_zero(store, slot) == 0


async def test_the_refusal_names_the_first_charge_that_does_not_fit_whatever_its_kind(
    store: CounterStore,
) -> None:
    assert (await store.acquire([rpm(1, "rpm:full")], T0)).admitted
    assert (await store.acquire([day("rpd:full", 1, 1)], T0)).admitted
    charges = [
        WindowCharge("tpm:k", 5, 10),  # fits
        InFlightCharge("inflight:k", 1),  # fits
        day("rpd:full", 1, 1),  # the first that does not
        rpm(1, "rpm:full"),  # does not fit either, but comes later
    ]
    verdict = await store.acquire(charges, T0 + 1)
    assert verdict.refused == 2 and verdict.retry_after == pytest.approx(3599.0, abs=0.01)
    # nothing was charged: the charges that fitted still fit in full
    later = await store.acquire(charges[:2], T0 + 1)
    assert later.admitted and later.totals == (5, 1)
