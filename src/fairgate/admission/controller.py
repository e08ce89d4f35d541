"""Admission control of one pool: when may a request go on to routing.

A request of band b is admitted at once when the pool's saturation, counting
the leases granted but not yet dispatched, is below b's ceiling (and nothing
of its band or above is waiting). Otherwise it waits in b's queue until a
release or a periodic re-check finds room, its TTL passes (504), or its caller
goes away (it leaves the queue at once). A band whose ceiling is above 1.0 is
never held and never queued. Each band's queue holds at most ``queue_size``
waiters; one more is refused with 503.

Serving order when room appears: bands from the top; within a band, the
``BandQueue`` order (fair-share priority level when ``order_by_priority``,
then tenants in turn, then arrival). Each grant re-reads the saturation with
the new pending count, so a burst can never pass one reading en masse.

Everything runs on one event loop, without locks: ``admit`` decides
synchronously before its only ``await``. Per request: O(1) queue work plus one
or two saturation readings (O(replicas) each); per release: one reading per
waiter it admits, plus one.

A ``reading()`` handed back to ``has_room`` or ``try_admit`` is taken again only
while nothing else can have run since: it was read in the event loop's current
turn (a callback the first reading of a turn schedules ends it, and a task that
awaits resumes only after that callback), with the same pending count. Nothing
else ran, so the pool is as it was; only the clock moved, by the caller's own
synchronous work (tens of microseconds), which no other code could observe.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from fairgate.admission.bands import Band, Bands
from fairgate.admission.lease import Lease
from fairgate.admission.observer import AdmissionObserver, NullObserver, Rejection
from fairgate.admission.queue import BandQueue
from fairgate.core.clock import Clock
from fairgate.core.errors import GatewayError, GatewayTimeout, ServiceUnavailable

__all__ = ["DEFAULT_RECHECK_INTERVAL", "AdmissionController", "Reading"]

_log = logging.getLogger(__name__)

DEFAULT_RECHECK_INTERVAL = 0.25
"""Seconds between re-checks that catch metric changes no release announces, and TTLs."""


class Reading(NamedTuple):
    """One saturation reading of a pool (``AdmissionController.reading``): ``value``
    counting ``pending``, read in the event loop's ``turn`` of its ``source``."""

    value: float
    pending: int
    turn: int
    source: object


@dataclass(eq=False, slots=True)
class _Waiter:
    key: int
    band: Band
    tenant: str
    priority: int
    cost: int
    enqueued_at: float
    deadline: float
    future: asyncio.Future[Lease | GatewayError]
    queued: bool = True


class AdmissionController:
    """Admission for the pool ``pool`` over ``bands``.

    ``saturation_fn(pending)`` returns the pool's saturation (>= 0, 1.0 =
    full) given ``pending``, the summed cost of granted, undispatched leases;
    it is called synchronously, must be cheap (a ``SaturationDetector``) and
    should not raise (an error reaches the caller of ``admit``; ``release()``
    and ``run()`` log it and go on).
    ``queue_size`` >= 0 waiters per band; ``queue_ttl`` > 0 seconds on
    ``clock.monotonic()``; ``recheck_interval`` > 0 seconds (real event-loop
    time) between the periodic re-checks of ``run()``, which also bounds how
    late a TTL is answered. Raises ``ValueError`` on parameters out of range.
    """

    def __init__(
        self,
        pool: str,
        bands: Bands,
        *,
        queue_size: int,
        queue_ttl: float,
        clock: Clock,
        saturation_fn: Callable[[int], float],
        observer: AdmissionObserver | None = None,
        order_by_priority: bool = False,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
    ) -> None:
        if queue_size < 0:
            raise ValueError(f"queue_size must be >= 0, got {queue_size!r}")
        if not queue_ttl > 0:
            raise ValueError(f"queue_ttl must be > 0, got {queue_ttl!r}")
        if not recheck_interval > 0:
            raise ValueError(f"recheck_interval must be > 0, got {recheck_interval!r}")
        self.pool = pool
        self.bands = bands
        self.queue_size = queue_size
        self.queue_ttl = float(queue_ttl)
        self.order_by_priority = order_by_priority
        self.recheck_interval = float(recheck_interval)
        self._clock = clock
        self._saturation_fn = saturation_fn
        self._observer: AdmissionObserver = observer or NullObserver()
        held = [b for b in bands if not b.never_held]
        self._queues: dict[str, BandQueue[_Waiter]] = {b.name: BandQueue() for b in held}
        self._held = [(b, self._queues[b.name]) for b in held]
        self._arrivals: OrderedDict[int, _Waiter] = OrderedDict()  # TTL order = arrival order
        self._keys = itertools.count()
        self._pending = 0
        self._leases = 0
        self._by_name = {b.name: b for b in bands}
        self._turn = 0  # the event loop's turns since the first reading (see the module text)
        self._turn_on: asyncio.AbstractEventLoop | None = None  # where its end is scheduled

    @property
    def pending(self) -> int:
        """Summed cost of the leases granted and not yet dispatched or released."""
        return self._pending

    @property
    def leases(self) -> int:
        """Leases granted and not yet released."""
        return self._leases

    def depth(self, band: str | None = None) -> int:
        """Waiters in ``band``'s queue, or in all queues of the pool."""
        if band is None:
            return len(self._arrivals)
        queue = self._queues.get(band)
        return 0 if queue is None else len(queue)

    def saturation(self) -> float:
        """The pool's saturation now, counting pending leases (and reported to the observer)."""
        value = self._saturation_fn(self._pending)
        self._observer.saturation(self.pool, value)
        return value

    def reading(self) -> Reading:
        """The pool's saturation now, counting pending leases (not reported), to hand to
        ``has_room`` and ``try_admit``: they take it again instead of reading the pool
        while nothing else can have run since (see the module text)."""
        return Reading(self._saturation_fn(self._pending), self._pending, self._now(), self)

    def has_room(self, band: str, reading: Reading | None = None) -> bool:
        """Whether ``admit`` in ``band`` would grant a lease at once now, without waiting.

        A pure check: nothing is granted, queued or reported, and the answer holds
        until the next ``await`` of the caller. It errs towards False: any waiter in
        any band makes it False (the pool is contended, its queues are served first).
        ``reading`` (from ``reading()``) is taken again while still current.
        Raises ``ValueError`` for an unknown band."""
        the_band = self._by_name.get(band) or self._band(band)
        if the_band.never_held:
            return True
        if self._arrivals:
            return False
        if reading is not None and self._current(reading):
            return reading.value < the_band.ceiling
        return self._saturation_fn(self._pending) < the_band.ceiling

    def try_admit(
        self,
        *,
        band: str,
        tenant: str,
        priority: int = 0,
        cost_hint: int = 1,
        reading: Reading | None = None,
    ) -> Lease | None:
        """``admit`` when it would grant at once (``has_room``), from one saturation reading
        (reported like ``admit``'s): ``reading`` while still current (see ``reading``),
        else one taken now; None when the request would have to wait: nothing is
        then granted or queued. What ``has_room`` and then ``admit`` with no ``await``
        between them do, without reading the pool twice. Raises ``ValueError`` for an
        unknown band or a cost below 1."""
        the_band = self._by_name.get(band) or self._band(band)
        if cost_hint < 1:
            raise ValueError(f"cost_hint must be >= 1, got {cost_hint!r}")
        if the_band.never_held:
            return self._grant(the_band, tenant, priority, cost_hint, 0.0)
        if self._arrivals:
            return None
        if reading is not None and self._current(reading):
            value = reading.value
            self._observer.saturation(self.pool, value)
        else:
            value = self.saturation()
        if not value < the_band.ceiling:
            return None
        return self._grant(the_band, tenant, priority, cost_hint, 0.0)

    def _current(self, reading: Reading) -> bool:
        """Was ``reading`` read here in this turn of the event loop, at today's pending
        count? (Nothing else can have run since: see the module text.)"""
        return (
            reading.source is self
            and reading.turn == self._turn >= 0
            and reading.pending == self._pending
        )

    def _now(self) -> int:
        """The event loop's turn, making sure it ends (-1 outside a running loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return -1
        if self._turn_on is not loop:
            if self._turn_on is not None:
                self._turn += 1  # another loop: whatever was read before is over
            self._turn_on = loop
            loop.call_soon(self._turn_ends)
        return self._turn

    def _turn_ends(self) -> None:
        self._turn += 1
        self._turn_on = None

    async def admit(
        self, *, band: str, tenant: str, priority: int = 0, cost_hint: int = 1
    ) -> Lease:
        """A lease for one request of ``tenant`` (the key) in ``band``, once the pool has room.

        ``priority`` is the fair-share priority number (lower first; it orders
        waiters only with ``order_by_priority``); ``cost_hint`` >= 1 is the
        request's weight in the pending count. Raises ``ServiceUnavailable``
        (503, code ``queue_full``) when the band's queue is full,
        ``GatewayTimeout`` (504, code ``queue_timeout``) after ``queue_ttl``,
        ``ValueError`` for an unknown band or a cost below 1. Cancelling the
        caller takes the request out of the queue (or gives back a lease
        granted in the meantime).
        """
        the_band = self._band(band)
        if cost_hint < 1:
            raise ValueError(f"cost_hint must be >= 1, got {cost_hint!r}")
        if the_band.never_held:
            return self._grant(the_band, tenant, priority, cost_hint, 0.0)
        self._dispatch()
        if self.saturation() < the_band.ceiling:
            # After _dispatch nobody of this band or above can be waiting: they
            # would have had room first (ceilings never rise going down).
            return self._grant(the_band, tenant, priority, cost_hint, 0.0)
        waiter = self._enqueue(the_band, tenant, priority, cost_hint)
        try:
            outcome = await waiter.future
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        if isinstance(outcome, GatewayError):
            raise outcome
        return outcome

    def recheck(self) -> None:
        """Answer waiters past their TTL, then admit whoever has room now.

        ``run()`` calls it every ``recheck_interval``; call it also when
        engine metrics change (after a scrape) for a quicker reaction.
        """
        self._dispatch()
        if not self._arrivals:
            self.saturation()  # keep the gauge current while nobody waits

    async def run(self) -> None:
        """Re-check every ``recheck_interval`` seconds until cancelled (a task the owner stops).

        A failing re-check (a ``saturation_fn`` that raised) is logged and the
        loop goes on: stopping it would leave waiters to their TTL.
        """
        while True:
            await asyncio.sleep(self.recheck_interval)
            try:
                self.recheck()
            except Exception:
                _log.exception("admission re-check failed in pool %s", self.pool)

    def _band(self, name: str) -> Band:
        band = self._by_name.get(name)
        if band is None:
            raise ValueError(f"unknown band {name!r} in pool {self.pool!r}")
        return band

    def _enqueue(self, band: Band, tenant: str, priority: int, cost: int) -> _Waiter:
        queue = self._queues[band.name]
        if len(queue) >= self.queue_size and not self._make_room(queue, tenant):
            self._observer.rejected(self.pool, band.name, Rejection.QUEUE_FULL)
            raise _queue_full()
        now = self._clock.monotonic()
        loop = asyncio.get_running_loop()
        waiter = _Waiter(
            key=next(self._keys),
            band=band,
            tenant=tenant,
            priority=priority,
            cost=cost,
            enqueued_at=now,
            deadline=now + self.queue_ttl,
            future=loop.create_future(),
        )
        queue.push(waiter.key, tenant, priority if self.order_by_priority else 0, waiter)
        self._arrivals[waiter.key] = waiter
        self._observer.queue_depth(self.pool, band.name, len(queue))
        return waiter

    def _make_room(self, queue: BandQueue[_Waiter], tenant: str) -> bool:
        """Room in the full ``queue`` for one more waiter of ``tenant``, taken from the
        newest waiter of the tenant with the most, when that one would still have at
        least as many as ``tenant`` (else a key filling the queue would lock every
        other key out of it); False when ``tenant`` has as good a share already."""
        crowded = queue.crowded()
        if crowded is None or crowded[1] < queue.waiting(tenant) + 2:
            return False
        waiter = queue.evict_newest(crowded[0])
        assert waiter is not None
        self._take_out(waiter)
        if waiter.future.done():  # its caller was cancelled and has not resumed yet
            self._observer.rejected(self.pool, waiter.band.name, Rejection.CANCELLED)
        else:
            self._observer.rejected(self.pool, waiter.band.name, Rejection.QUEUE_FULL)
            waiter.future.set_result(_queue_full())
        return True

    def _grant(self, band: Band, tenant: str, priority: int, cost: int, waited: float) -> Lease:
        self._pending += cost
        self._leases += 1
        self._observer.admitted(self.pool, band.name, waited)
        return Lease(self, band, tenant, priority, cost, waited)

    def _dispatch(self) -> None:
        if not self._arrivals:
            return
        self._expire(self._clock.monotonic())
        for band, queue in self._held:
            while len(queue):
                if self.saturation() >= band.ceiling:
                    return  # and no room below either: ceilings never rise going down
                waiter = queue.pop()
                assert waiter is not None
                self._take_out(waiter)
                if waiter.future.done():  # its caller was cancelled and has not resumed yet
                    self._observer.rejected(self.pool, band.name, Rejection.CANCELLED)
                    continue
                waited = self._clock.monotonic() - waiter.enqueued_at
                lease = self._grant(band, waiter.tenant, waiter.priority, waiter.cost, waited)
                waiter.future.set_result(lease)

    def _expire(self, now: float) -> None:
        while self._arrivals:
            waiter = next(iter(self._arrivals.values()))
            if waiter.deadline > now:
                return
            self._queues[waiter.band.name].remove(waiter.key)
            self._take_out(waiter)
            if waiter.future.done():
                self._observer.rejected(self.pool, waiter.band.name, Rejection.CANCELLED)
                continue
            self._observer.rejected(self.pool, waiter.band.name, Rejection.QUEUE_TIMEOUT)
            waiter.future.set_result(
                GatewayTimeout(
                    "The request waited too long for capacity for this model.",
                    code=Rejection.QUEUE_TIMEOUT.value,
                )
            )

    def _take_out(self, waiter: _Waiter) -> None:
        """Forget a waiter already removed from its band queue."""
        waiter.queued = False
        del self._arrivals[waiter.key]
        depth = len(self._queues[waiter.band.name])
        self._observer.queue_depth(self.pool, waiter.band.name, depth)

    def _abandon(self, waiter: _Waiter) -> None:
        """The caller of a waiter was cancelled: leave the queue, or give back its lease."""
        if waiter.queued:
            self._queues[waiter.band.name].remove(waiter.key)
            self._take_out(waiter)
            self._observer.rejected(self.pool, waiter.band.name, Rejection.CANCELLED)
        elif waiter.future.done() and not waiter.future.cancelled():
            outcome = waiter.future.result()
            if isinstance(outcome, Lease):
                outcome.release()

    def _lease_dispatched(self, lease: Lease) -> None:
        self._pending -= lease.cost

    def _lease_released(self, lease: Lease, *, was_pending: bool) -> None:
        if was_pending:
            self._pending -= lease.cost
        self._leases -= 1
        if not self._arrivals:
            return  # nobody waits (what _dispatch checks first)
        try:
            self._dispatch()
        except Exception:  # a release never fails; run() will try again
            _log.exception("admission after a release failed in pool %s", self.pool)


def _queue_full() -> ServiceUnavailable:
    return ServiceUnavailable(
        "Too many requests are waiting for this model's capacity; try again later.",
        code=Rejection.QUEUE_FULL.value,
    )
