"""The admission controller: what a caller of ``admit`` sees, request by request.

The pool is ``PoolLoad`` (10 batch slots unless a test says otherwise), so the
saturation is (in flight + pending) / 10: bronze (0.8) passes while fewer than
8 are counted, gold (1.0) while fewer than 10, platinum (1.5) always.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from fairgate.admission import AdmissionController, Bands, Lease, Rejection
from fairgate.core.errors import GatewayTimeout, ServiceUnavailable
from fairgate.fairshare import PriorityClass, decide

from .conftest import PRODUCT_BANDS, ManualClock, PoolLoad, RecordingObserver, admit_now


async def settle() -> None:
    """Let every task that can run, run (a handful of loop iterations)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def cancel_all(tasks: list[asyncio.Task[Lease]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def make(
    clock: ManualClock,
    saturation_fn: Callable[[int], float],
    **kwargs: Any,
) -> AdmissionController:
    options: dict[str, Any] = {"queue_size": 1000, "queue_ttl": 30.0} | kwargs
    return AdmissionController(
        "b300", Bands(PRODUCT_BANDS), clock=clock, saturation_fn=saturation_fn, **options
    )


def queue(
    controller: AdmissionController, band: str, tenant: str, priority: int = 0
) -> asyncio.Task[Lease]:
    return asyncio.create_task(controller.admit(band=band, tenant=tenant, priority=priority))


async def serve_one_at_a_time(
    controller: AdmissionController, load: PoolLoad, tasks: list[asyncio.Task[Lease]], n: int
) -> list[str]:
    """Free one batch slot at a time, ``n`` times; the tenants admitted, in order."""
    order: list[str] = []
    for _ in range(n):
        load.in_flight -= 1  # a request of somebody else finished
        controller.recheck()
        await settle()
        newly = [t for t in tasks if t.done() and not t.cancelled() and t.result().pending]
        assert len(newly) == 1
        order.append(newly[0].result().tenant)
        load.start(newly[0].result())
    return order


async def test_a_request_under_the_ceiling_is_admitted_at_once(
    controller: AdmissionController, load: PoolLoad, observer: RecordingObserver
) -> None:
    load.in_flight = 5
    lease = admit_now(controller.admit(band="bronze", tenant="key-1"))
    assert (lease.band.name, lease.tenant, lease.waited) == ("bronze", "key-1", 0.0)
    assert lease.pending and controller.pending == 1 and controller.leases == 1
    assert controller.depth() == 0
    assert observer.grants == [("bronze", 0.0)]


async def test_a_request_at_its_ceiling_waits_while_a_higher_band_passes(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 8  # 0.8: bronze's ceiling, below gold's
    bronze = queue(controller, "bronze", "key-1")
    await settle()
    assert not bronze.done() and controller.depth("bronze") == 1
    gold = admit_now(controller.admit(band="gold", tenant="key-2"))
    assert gold.band.name == "gold"
    await cancel_all([bronze])


async def test_a_ceiling_of_one_holds_at_full_and_above_one_never_holds(
    clock: ManualClock, observer: RecordingObserver
) -> None:
    controller = make(clock, lambda pending: math.inf, queue_size=0, observer=observer)
    leases = [admit_now(controller.admit(band="platinum", tenant=f"k{i}")) for i in range(50)]
    assert controller.leases == 50 and controller.depth() == 0
    with pytest.raises(ServiceUnavailable):  # gold, at 1.0, is held (and has no queue here)
        await asyncio.wait_for(controller.admit(band="gold", tenant="k"), timeout=10.0)
    for lease in leases:
        lease.release()
    assert controller.leases == 0


async def test_a_release_admits_the_head_of_the_queue(
    controller: AdmissionController, clock: ManualClock, load: PoolLoad
) -> None:
    running = [admit_now(controller.admit(band="gold", tenant=f"k{i}")) for i in range(10)]
    for lease in running:
        load.start(lease)
    first = queue(controller, "gold", "first")
    await settle()
    second = queue(controller, "gold", "second")
    await settle()
    assert controller.depth("gold") == 2
    clock.advance(2.0)
    load.finish(running[0])
    await settle()
    assert first.done() and not second.done()
    assert first.result().tenant == "first" and first.result().waited == 2.0
    await cancel_all([second])


async def test_a_simultaneous_burst_passes_only_as_far_as_the_room(
    controller: AdmissionController, load: PoolLoad
) -> None:
    tasks = [queue(controller, "gold", f"k{i}") for i in range(100)]
    await settle()
    admitted = [t.result() for t in tasks if t.done()]
    assert len(admitted) == 10  # the granted, undispatched leases count: 10 / 10 = full
    assert controller.pending == 10 and controller.depth("gold") == 90
    for lease in admitted:
        load.start(lease)  # pending → in flight: still full
    controller.recheck()
    await settle()
    assert sum(t.done() for t in tasks) == 10 and controller.pending == 0
    await cancel_all(tasks)


async def test_the_cost_hint_weighs_in_the_pending_count(
    controller: AdmissionController, load: PoolLoad
) -> None:
    admit_now(controller.admit(band="gold", tenant="big", cost_hint=9))
    assert controller.pending == 9
    admit_now(controller.admit(band="gold", tenant="small"))  # 0.9 < 1.0
    task = queue(controller, "gold", "next")  # 1.0
    await settle()
    assert not task.done()
    await cancel_all([task])


async def test_room_goes_to_the_higher_band_first(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 10
    bronze = [queue(controller, "bronze", f"b{i}") for i in range(3)]
    await settle()
    gold = [queue(controller, "gold", f"g{i}") for i in range(3)]
    await settle()
    load.in_flight = 7  # room for three gold (0.7, 0.8, 0.9), bronze needs < 0.8
    controller.recheck()
    await settle()
    assert all(t.done() for t in gold)
    assert not any(t.done() for t in bronze)
    await cancel_all(bronze)


async def test_keys_are_served_in_turn_whatever_their_number_of_waiters(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 10
    tasks = [queue(controller, "gold", "flood") for _ in range(100)]
    tasks += [queue(controller, "gold", "a") for _ in range(10)]
    tasks += [queue(controller, "gold", "b") for _ in range(10)]
    await settle()
    order = await serve_one_at_a_time(controller, load, tasks, 30)
    assert Counter(order) == {"flood": 10, "a": 10, "b": 10}
    assert order[:6] == ["flood", "a", "b", "flood", "a", "b"]
    await cancel_all(tasks)


async def test_a_full_queue_refuses_with_503(
    clock: ManualClock, load: PoolLoad, observer: RecordingObserver
) -> None:
    controller = make(clock, load, queue_size=3, observer=observer)
    load.in_flight = 10
    waiting = [queue(controller, "gold", f"k{i}") for i in range(3)]
    await settle()
    with pytest.raises(ServiceUnavailable) as refused:
        await asyncio.wait_for(controller.admit(band="gold", tenant="one-more"), timeout=10.0)
    assert (refused.value.status, refused.value.code) == (503, "queue_full")
    assert observer.rejections == {("gold", Rejection.QUEUE_FULL): 1}
    waiting.append(queue(controller, "bronze", "other-band"))  # each band has its own queue
    await settle()
    assert controller.depth("bronze") == 1 and not waiting[-1].done()
    await cancel_all(waiting)


async def test_a_key_that_fills_the_queue_gives_way_to_another_key(
    clock: ManualClock, load: PoolLoad, observer: RecordingObserver
) -> None:
    # One key opening as many requests as the queue holds once locked every other key
    # of its band out with 503: now its newest waiter gives its place to a key with
    # fewer, down to an even split, and that key is served in its turn.
    controller = make(clock, load, queue_size=4, observer=observer)
    load.in_flight = 10
    flood = [queue(controller, "gold", "flood") for _ in range(4)]
    await settle()
    other = [queue(controller, "gold", "other")]
    await settle()
    assert controller.depth("gold") == 4 and not other[0].done()
    with pytest.raises(ServiceUnavailable) as pushed_out:
        await flood[3]  # the newest of the flood
    assert (pushed_out.value.status, pushed_out.value.code) == (503, "queue_full")
    other.append(queue(controller, "gold", "other"))  # 2 and 2: an even split
    await settle()
    with pytest.raises(ServiceUnavailable):
        await flood[2]
    assert not flood[1].done() and not other[1].done()
    with pytest.raises(ServiceUnavailable):
        await asyncio.wait_for(controller.admit(band="gold", tenant="other"), timeout=10.0)
    with pytest.raises(ServiceUnavailable):
        await asyncio.wait_for(controller.admit(band="gold", tenant="flood"), timeout=10.0)
    assert observer.rejections == {("gold", Rejection.QUEUE_FULL): 4}
    waiting = flood[:2] + other
    assert await serve_one_at_a_time(controller, load, waiting, 4) == [
        "flood",
        "other",
        "flood",
        "other",
    ]
    await cancel_all(waiting)


async def test_a_request_waiting_past_its_ttl_gets_504(
    controller: AdmissionController,
    clock: ManualClock,
    load: PoolLoad,
    observer: RecordingObserver,
) -> None:
    load.in_flight = 10
    task = queue(controller, "gold", "k")
    await settle()
    clock.advance(29.9)
    controller.recheck()
    await settle()
    assert not task.done()
    clock.advance(0.2)
    load.in_flight = 0  # room appears too late: a request past its TTL is never admitted
    controller.recheck()
    with pytest.raises(GatewayTimeout) as timed_out:
        await task
    assert (timed_out.value.status, timed_out.value.code) == (504, "queue_timeout")
    assert controller.depth() == 0 and controller.leases == 0
    assert observer.rejections == {("gold", Rejection.QUEUE_TIMEOUT): 1}


async def test_a_cancelled_waiter_leaves_the_queue_at_once(
    controller: AdmissionController, load: PoolLoad, observer: RecordingObserver
) -> None:
    load.in_flight = 10
    first = queue(controller, "gold", "gone")
    second = queue(controller, "gold", "stays")
    await settle()
    first.cancel()
    await settle()
    assert controller.depth("gold") == 1
    assert observer.depths[("b300", "gold")][-1] == 1
    assert observer.rejections == {("gold", Rejection.CANCELLED): 1}
    load.in_flight = 9
    controller.recheck()
    await settle()
    assert second.result().tenant == "stays" and controller.leases == 1


async def test_a_waiter_cancelled_before_the_dispatcher_runs_is_skipped(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 10
    first = queue(controller, "gold", "gone")
    second = queue(controller, "gold", "stays")
    await settle()
    first.cancel()  # its caller has not resumed yet when the room appears
    load.in_flight = 9
    controller.recheck()
    await settle()
    assert first.cancelled() and second.result().tenant == "stays"
    assert controller.leases == 1 and controller.depth() == 0


async def test_a_lease_granted_to_a_caller_that_went_away_is_given_back(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 10
    task = queue(controller, "gold", "k")
    await settle()
    load.in_flight = 9
    controller.recheck()  # grants at once; the caller resumes later
    assert controller.leases == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert controller.leases == 0 and controller.pending == 0


async def test_priority_order_serves_lower_numbers_first_then_keys_in_turn(
    clock: ManualClock, load: PoolLoad
) -> None:
    controller = make(clock, load, order_by_priority=True)
    load.in_flight = 10
    arrivals = [("a", 20), ("b", 0), ("c", 10), ("d", 1), ("e", 0), ("b", 0)]
    tasks = [queue(controller, "gold", tenant, priority) for tenant, priority in arrivals]
    await settle()
    order = await serve_one_at_a_time(controller, load, tasks, len(arrivals))
    assert order == ["b", "e", "b", "d", "c", "a"]


async def test_without_priority_order_the_numbers_do_not_reorder(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 10
    arrivals = [("a", 20), ("b", 0), ("c", 10)]
    tasks = [queue(controller, "gold", tenant, priority) for tenant, priority in arrivals]
    await settle()
    assert await serve_one_at_a_time(controller, load, tasks, 3) == ["a", "b", "c"]


async def test_within_share_requests_pass_borrowers_in_the_queue(
    clock: ManualClock, load: PoolLoad
) -> None:
    # The fair-share decisions of two organisations: A at its reservation borrows, B does not.
    borrower = decide(
        "A", within_share_in_flight=8, reservation=8, rank=1, cls=PriorityClass.INTERACTIVE
    )
    owner = decide("B", within_share_in_flight=0, reservation=2, rank=0, cls=PriorityClass.BATCH)
    controller = make(clock, load, order_by_priority=True)
    load.in_flight = 10
    tasks = [queue(controller, "gold", "key-A", borrower.priority) for _ in range(3)]
    tasks.append(queue(controller, "gold", "key-B", owner.priority))
    await settle()
    order = await serve_one_at_a_time(controller, load, tasks, 2)
    assert order == ["key-B", "key-A"]
    await cancel_all(tasks)


async def test_the_periodic_recheck_admits_when_the_load_drops_without_a_release(
    clock: ManualClock, load: PoolLoad
) -> None:
    controller = make(clock, load, recheck_interval=0.01)
    runner = asyncio.create_task(controller.run())
    load.in_flight = 10
    task = queue(controller, "gold", "k")
    await asyncio.sleep(0.05)
    assert not task.done()
    load.in_flight = 0  # the engines' metrics changed; nothing was released
    lease = await asyncio.wait_for(task, timeout=10.0)
    assert lease.tenant == "k"
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


async def test_a_failing_saturation_reading_neither_fails_a_release_nor_stops_the_recheck(
    clock: ManualClock, load: PoolLoad, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"now": False}

    def reading(pending: int) -> float:
        if broken["now"]:
            raise RuntimeError("metrics layer broke")
        return load(pending)

    controller = make(clock, reading, recheck_interval=0.01)
    runner = asyncio.create_task(controller.run())
    lease = admit_now(controller.admit(band="gold", tenant="first"))
    load.start(lease)
    load.in_flight = 10
    task = queue(controller, "gold", "k")
    await settle()
    broken["now"] = True
    load.finish(lease)  # does not raise
    assert lease.released and controller.leases == 0
    await asyncio.sleep(0.05)
    assert not task.done() and "re-check failed" in caplog.text
    broken["now"] = False
    assert (await asyncio.wait_for(task, timeout=10.0)).tenant == "k"
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner


async def test_the_observer_sees_depth_waits_and_saturation(
    controller: AdmissionController,
    clock: ManualClock,
    load: PoolLoad,
    observer: RecordingObserver,
) -> None:
    load.in_flight = 10
    tasks = [queue(controller, "bronze", f"k{i}") for i in range(2)]
    await settle()
    clock.advance(1.5)
    load.in_flight = 7
    controller.recheck()
    await settle()
    assert observer.depths[("b300", "bronze")] == [1, 2, 1]
    assert observer.grants == [("bronze", 1.5)]
    assert observer.saturations[-1] == 0.8 and 1.0 in observer.saturations
    await cancel_all(tasks)


async def test_bad_arguments_are_refused(
    controller: AdmissionController, clock: ManualClock
) -> None:
    with pytest.raises(ValueError, match="unknown band"):
        await controller.admit(band="diamond", tenant="k")
    with pytest.raises(ValueError, match="cost_hint"):
        await controller.admit(band="gold", tenant="k", cost_hint=0)
    for bad in ({"queue_size": -1}, {"queue_ttl": 0.0}, {"recheck_interval": 0.0}):
        with pytest.raises(ValueError):
            make(clock, lambda pending: 0.0, **bad)


async def test_has_room_says_what_admit_would_do_now_and_takes_nothing(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 7  # 0.7: bronze (0.8) has room
    assert controller.has_room("bronze") and controller.has_room("gold")
    assert controller.pending == 0 and controller.leases == 0 and controller.depth() == 0
    load.in_flight = 8  # bronze's ceiling: admit would make it wait
    assert not controller.has_room("bronze") and controller.has_room("gold")
    bronze = queue(controller, "bronze", "key-1")
    await settle()
    # a waiter anywhere: the pool is contended, so even gold's answer is no
    assert controller.depth("bronze") == 1 and not controller.has_room("gold")
    assert controller.has_room("platinum")  # a band that is never held
    await cancel_all([bronze])
    assert controller.has_room("gold")
    with pytest.raises(ValueError):
        controller.has_room("tin")


async def test_try_admit_grants_what_admit_would_grant_at_once_from_one_reading(
    controller: AdmissionController, load: PoolLoad, observer: RecordingObserver
) -> None:
    load.in_flight = 7  # 0.7: bronze (0.8) has room
    before = load.readings
    lease = controller.try_admit(band="bronze", tenant="key-1")
    assert lease is not None and (lease.band.name, lease.tenant, lease.waited) == (
        "bronze",
        "key-1",
        0.0,
    )
    assert load.readings == before + 1  # has_room then admit read the pool twice
    assert controller.pending == 1 and observer.saturations[-1] == 0.7
    # (7 + 1 pending) / 10 = 0.8: bronze would wait, so nothing is granted or queued
    assert controller.try_admit(band="bronze", tenant="key-2") is None
    assert controller.pending == 1 and controller.leases == 1 and controller.depth() == 0
    bronze = queue(controller, "bronze", "key-3")
    await settle()
    # a waiter anywhere: even gold, with room, is not granted ahead of it
    assert controller.try_admit(band="gold", tenant="key-4") is None
    assert controller.try_admit(band="platinum", tenant="key-5") is not None  # never held
    await cancel_all([bronze])
    with pytest.raises(ValueError):
        controller.try_admit(band="tin", tenant="key-6")
    with pytest.raises(ValueError):
        controller.try_admit(band="gold", tenant="key-6", cost_hint=0)


async def test_a_reading_is_taken_again_only_while_nothing_else_can_have_run(
    controller: AdmissionController, load: PoolLoad, observer: RecordingObserver, clock: ManualClock
) -> None:
    load.in_flight = 7  # 0.7: bronze (0.8) has room
    before = load.readings
    reading = controller.reading()
    assert reading.value == 0.7 and load.readings == before + 1
    assert controller.has_room("bronze", reading) and load.readings == before + 1
    # no await since: the same reading grants (and is reported like admit's)
    lease = controller.try_admit(band="bronze", tenant="key-1", reading=reading)
    assert lease is not None and load.readings == before + 1
    assert observer.saturations[-1] == 0.7
    # the pending count moved since it was read: the pool is read again, (7 + 1) / 10
    assert controller.try_admit(band="bronze", tenant="key-2", reading=reading) is None
    assert load.readings == before + 2 and observer.saturations[-1] == 0.8
    lease.release()
    reading = controller.reading()
    assert reading.value == 0.7
    load.in_flight = 9  # another task fills the pool while this one awaits
    await asyncio.sleep(0)
    assert not controller.has_room("bronze", reading)
    assert controller.try_admit(band="bronze", tenant="key-3", reading=reading) is None
    assert observer.saturations[-1] == 0.9
    # a reading of another pool, or taken outside a running loop, is never taken again
    other = make(clock, lambda pending: 0.1)
    assert controller.try_admit(band="bronze", tenant="key-4", reading=other.reading()) is None
    assert controller.has_room("gold", controller.reading())  # 0.9 < gold's 1.0


def test_a_reading_outside_an_event_loop_is_never_taken_again(
    controller: AdmissionController, load: PoolLoad
) -> None:
    load.in_flight = 7
    reading = controller.reading()
    load.in_flight = 9
    assert reading.turn == -1
    assert not controller.has_room("bronze", reading)
    assert controller.try_admit(band="bronze", tenant="key-1", reading=reading) is None
