"""Admission under any interleaving of arrivals, dispatches, ends, cancels and time.

Every request submitted ends exactly one way (admitted, refused 503, timed out
504, or cancelled by its caller); no band's queue ever holds more than
``queue_size``; every waiter is either in a queue or answered; leases and
the pending count come back to zero once everything is released.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.admission import AdmissionController, Bands, Lease
from fairgate.core.errors import GatewayTimeout, ServiceUnavailable

from .conftest import PRODUCT_BANDS, ManualClock, PoolLoad

QUEUE_SIZE = 4
TTL = 30.0

_admit = st.tuples(
    st.just("admit"), st.sampled_from(["platinum", "gold", "bronze"]), st.sampled_from("abc")
)
_lease_op = st.tuples(st.sampled_from(["start", "finish", "cancel"]), st.integers(0, 40))
_time = st.tuples(st.just("tick"), st.floats(0.0, 20.0))
_load = st.tuples(st.just("load"), st.integers(0, 12))
OPERATIONS = st.lists(st.one_of(_admit, _admit, _lease_op, _time, _load), max_size=60)


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class _Run:
    def __init__(self, order_by_priority: bool) -> None:
        self.clock = ManualClock()
        self.load = PoolLoad(capacity=4.0)
        self.controller = AdmissionController(
            "pool",
            Bands(PRODUCT_BANDS),
            queue_size=QUEUE_SIZE,
            queue_ttl=TTL,
            clock=self.clock,
            saturation_fn=self.load,
            order_by_priority=order_by_priority,
        )
        self.tasks: list[asyncio.Task[Lease]] = []
        self.leases: list[Lease] = []
        self.seen: set[int] = set()

    def apply(self, op: tuple[object, ...]) -> None:
        kind = op[0]
        if kind == "admit":
            band, tenant = str(op[1]), str(op[2])
            priority = len(self.tasks) % 3
            coro = self.controller.admit(band=band, tenant=tenant, priority=priority)
            self.tasks.append(asyncio.create_task(coro))
        elif kind == "tick":
            self.clock.advance(float(op[1]))  # type: ignore[arg-type]
            self.controller.recheck()
        elif kind == "load":
            self.load.in_flight = int(op[1])  # type: ignore[call-overload]
            self.controller.recheck()
        elif kind == "cancel" and self.tasks:
            self.tasks[int(op[1]) % len(self.tasks)].cancel()  # type: ignore[call-overload]
        elif kind in ("start", "finish") and self.leases:
            lease = self.leases[int(op[1]) % len(self.leases)]  # type: ignore[call-overload]
            if kind == "start" and lease.pending:
                lease.dispatched()
            elif kind == "finish":
                lease.release()

    def collect(self) -> None:
        for task in self.tasks:
            done = task.done() and not task.cancelled() and task.exception() is None
            if done and id(task) not in self.seen:
                self.seen.add(id(task))
                self.leases.append(task.result())

    def check(self) -> None:
        for band in ("platinum", "gold", "bronze"):
            assert self.controller.depth(band) <= QUEUE_SIZE
        assert self.controller.depth() == sum(not t.done() for t in self.tasks)
        live = sum(not lease.released for lease in self.leases)
        assert self.controller.leases == live
        assert self.controller.pending == sum(lease.cost for lease in self.leases if lease.pending)


def _outcome(task: asyncio.Task[Lease]) -> str:
    if task.cancelled():
        return "cancelled"
    error = task.exception()
    if error is None:
        return "admitted"
    assert isinstance(error, ServiceUnavailable | GatewayTimeout), error
    return str(error.code)


async def _scenario(operations: list[tuple[object, ...]], order_by_priority: bool) -> None:
    run = _Run(order_by_priority)
    for op in operations:
        run.apply(op)
        await _settle()
        run.collect()
        run.check()
    run.clock.advance(TTL + 1.0)  # whoever still waits is answered
    run.controller.recheck()
    await _settle()
    run.collect()
    run.check()
    outcomes = Counter(_outcome(t) for t in run.tasks)
    assert sum(outcomes.values()) == len(run.tasks)
    assert set(outcomes) <= {"admitted", "cancelled", "queue_full", "queue_timeout"}
    assert outcomes["admitted"] == len(run.leases)
    for lease in run.leases:
        lease.release()
    assert run.controller.leases == 0 and run.controller.pending == 0
    assert run.controller.depth() == 0


@settings(max_examples=150, deadline=None)
@given(operations=OPERATIONS, order_by_priority=st.booleans())
def test_no_request_is_lost_and_no_queue_overflows(
    operations: list[tuple[object, ...]], order_by_priority: bool
) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_scenario(operations, order_by_priority))
    finally:
        loop.close()
