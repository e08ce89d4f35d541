"""What only the memory back end has: it forgets on its own, in the callers' time."""

from __future__ import annotations

from fairgate.limits import InFlightCharge, PeriodCharge, WindowCharge
from fairgate.state import MemoryCounterStore

T0 = 1_700_000_040.0


async def test_leases_never_expire_so_nothing_needs_refreshing() -> None:
    store = MemoryCounterStore()
    assert store.refresh_interval is None
    slot = InFlightCharge("inflight:k", 1)
    assert (await store.acquire([slot], T0)).admitted
    await store.refresh(T0 + 86_400)
    assert not (await store.acquire([slot], T0 + 86_400)).admitted


async def test_a_period_past_its_keep_until_is_forgotten_and_not_recreated() -> None:
    store = MemoryCounterStore()
    counter = PeriodCharge("budget:b", 10, 100, T0 + 1, T0 + 2, overdraft=True)
    verdict = await store.acquire([counter], T0)
    assert verdict.lease is not None
    await store.settle(verdict.lease, {"budget:b": 50}, T0 + 10)  # too late: not applied
    assert await store.read([counter], T0 + 1.5) == (10,)
    assert await store.read([counter], T0 + 10) == (0,)
    await store.acquire([PeriodCharge("rpd:k", 1, 5, T0 + 60, T0 + 120)], T0 + 100)  # sweeps
    assert await store.read([counter], T0 + 1.5) == (0,)


async def test_memory_stays_bounded_as_keys_come_and_go() -> None:
    store = MemoryCounterStore()
    for i in range(2_000):  # a crowd of keys, each seen once
        charges = [
            WindowCharge(f"rpm:{i}", 1, 10),
            PeriodCharge(f"rpd:{i}:d", 1, 10, T0 + 60, T0 + 120),
            InFlightCharge(f"inflight:{i}", 1),
        ]
        verdict = await store.acquire(charges, T0)
        assert verdict.lease is not None
        await store.settle(verdict.lease, {}, T0)
    await store.acquire([WindowCharge("rpm:late", 1, 10)], T0 + 3_600)  # an hour later
    assert len(store._windows) == 1 and "rpm:late" in store._windows
    assert store._periods == {} and store._in_flight == {}


async def test_a_window_whose_length_changes_starts_afresh() -> None:
    store = MemoryCounterStore()
    await store.acquire([WindowCharge("rpm:k", 1, 1, window=60.0)], T0)
    assert not (await store.acquire([WindowCharge("rpm:k", 1, 1, window=60.0)], T0)).admitted
    assert (
        await store.acquire([WindowCharge("rpm:k", 1, 1, window=10.0, granules=10)], T0)
    ).admitted
