"""The memory back end's counters saved to the store and restored into a new process's.

A "restart" here is a new ``MemoryCounterStore`` on the same store (SQLite and
PostgreSQL): what the old one counted must still count, whatever the counter
(key or team, RPM, TPM, RPD, budget), and in-flight slots must not come back.
"""

from __future__ import annotations

import pytest

from fairgate.accounting.snapshots import CounterSnapshots
from fairgate.limits import InFlightCharge, PeriodCharge, WindowCharge
from fairgate.limits.snapshot import SavedCounter
from fairgate.state import MemoryCounterStore
from fairgate.store import Store, counter_snapshots
from store.backends import FakeClock

DAY_END = FakeClock().wall() + 3_600.0

COUNTERS = (
    WindowCharge("rpm:key:k1", 1, 5),
    WindowCharge("tpm:team:lab", 700, 10_000),  # any counter of any kind, by its key alone
    WindowCharge("rpm:key:k2", 1, 10, window=10.0, granules=10),
    PeriodCharge("rpd:key:k1:2026-12-01", 1, 5, DAY_END, DAY_END + 60),
    PeriodCharge("budget:b1:d:2026-12-01", 2_500, 10_000, DAY_END, DAY_END + 60, overdraft=True),
)


async def _charge(state: MemoryCounterStore, now: float, times: int) -> None:
    for _ in range(times):
        assert (await state.acquire(list(COUNTERS), now)).admitted


async def test_a_new_process_restores_every_counter_and_no_in_flight_slot(store: Store) -> None:
    clock = FakeClock()
    before = MemoryCounterStore()
    await _charge(before, clock.wall(), 3)
    slot = InFlightCharge("inflight:key:k1", 1)
    assert (await before.acquire([slot], clock.wall())).admitted
    assert await CounterSnapshots(store, before, clock).save() == len(COUNTERS)

    clock.advance(2.0)
    after = MemoryCounterStore()
    assert await CounterSnapshots(store, after, clock).restore() == len(COUNTERS)
    now = clock.wall()
    assert await after.read(list(COUNTERS), now) == await before.read(list(COUNTERS), now)
    assert await after.read(list(COUNTERS), now) == (3, 2_100, 3, 3, 7_500)
    assert (await after.acquire([slot], now)).admitted  # the old slot died with its process
    # The restored counts bind: two more requests fit the RPM of 5, the third does not.
    rpm = WindowCharge("rpm:key:k1", 1, 5)
    assert [(await after.acquire([rpm], now)).admitted for _ in range(3)] == [True, True, False]


async def test_what_has_left_its_window_or_period_is_not_saved_or_restored(store: Store) -> None:
    clock = FakeClock()
    state = MemoryCounterStore()
    await _charge(state, clock.wall(), 1)
    clock.advance(30.0)  # the 10 s window of k2 is over, the minute windows are not
    await CounterSnapshots(store, state, clock).save()
    async with store.read() as conn:
        saved = {c.key for c in await counter_snapshots.load(conn)}
    assert "rpm:key:k2" not in saved and "rpm:key:k1" in saved

    clock.advance(DAY_END + 120 - clock.wall())  # past every period's keep_until
    later = MemoryCounterStore()
    assert await CounterSnapshots(store, later, clock).restore() == 0


async def test_restoring_never_lowers_a_counter_and_replaces_the_previous_snapshot(
    store: Store,
) -> None:
    clock = FakeClock()
    old = MemoryCounterStore()
    await _charge(old, clock.wall(), 1)
    await CounterSnapshots(store, old, clock).save()
    busy = MemoryCounterStore()
    await _charge(busy, clock.wall(), 4)
    assert await CounterSnapshots(store, busy, clock).restore() == len(COUNTERS)
    assert await busy.read(list(COUNTERS), clock.wall()) == (4, 2_800, 4, 4, 10_000)

    empty = MemoryCounterStore()
    await CounterSnapshots(store, empty, clock).save()  # nothing live: the old set goes
    assert await CounterSnapshots(store, MemoryCounterStore(), clock).restore() == 0


def test_malformed_saved_counters_are_skipped() -> None:
    state = MemoryCounterStore()
    now = FakeClock().wall()
    restored = state.restore(
        [
            SavedCounter("a", "window", {"length": 60.0}),
            SavedCounter("b", "period", {"value": "many", "keep_until": now + 60}),
            SavedCounter("c", "window", {"length": -1, "granules": 60, "buckets": []}),
            SavedCounter("d", "period", {"value": 2, "keep_until": now + 60}),
        ],
        now,
    )
    assert restored == 1


async def test_fair_share_usage_survives_a_restart_decayed_as_if_nothing_happened(
    store: Store,
) -> None:
    """A heavy organisation does not get its fair-share priority back by a restart."""
    clock, half_life = FakeClock(), 3_600.0
    before = MemoryCounterStore()
    await before.charge("gpu", "A", 8.0, clock.wall(), half_life)
    await before.charge("gpu", "B", 1.0, clock.wall(), half_life)
    await CounterSnapshots(store, before, clock).save()
    clock.advance(half_life)

    after = MemoryCounterStore()
    await after.charge("gpu", "B", 5.0, clock.wall(), half_life)  # newer and larger: kept
    assert await CounterSnapshots(store, after, clock).restore() == 2
    usage = await after.usage("gpu", clock.wall(), half_life)
    assert usage == pytest.approx({"A": 4.0, "B": 5.0})
    assert usage == pytest.approx(
        {"A": (await before.usage("gpu", clock.wall(), half_life))["A"], "B": 5.0}
    )


async def test_team_usage_survives_a_restart_apart_from_its_organisations(store: Store) -> None:
    """A team's decayed usage ranks it inside its organisation: a restart keeps it."""
    clock, half_life = FakeClock(), 3_600.0
    before = MemoryCounterStore()
    await before.charge("gpu", "A", 6.0, clock.wall(), half_life, team="research")
    await before.charge("gpu", "A", 2.0, clock.wall(), half_life, team="ops")
    await CounterSnapshots(store, before, clock).save()
    clock.advance(half_life)

    after = MemoryCounterStore()
    assert await CounterSnapshots(store, after, clock).restore() == 3
    assert await after.usage("gpu", clock.wall(), half_life) == pytest.approx({"A": 4.0})
    teams = await after.team_usage("gpu", clock.wall(), half_life)
    assert teams == {"A": pytest.approx({"research": 3.0, "ops": 1.0})}
