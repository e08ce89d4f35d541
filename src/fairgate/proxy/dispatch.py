"""Priorities decided at dispatch: borrowers wait in the gateway while their pool is full.

    grant = dispatcher.grant_now(pool)              # room, nobody held: go at once
    if grant is None:
        grant = await dispatcher.wait(pool, org, cls)   # held; 503 queue_full, 504 queue_timeout
    ...                                             # claim again, route, send
    grant.dispatched()                              # the replica's in-flight count has it
    ...
    grant.release(); dispatcher.freed(pool)         # the request left the pool

A borrower sent to an engine at once waits in the engine's queue with the
priority of its organisation's rank at arrival. Held here, it is dispatched
when a seat frees, by the rank its organisation has *then*
(``fairgate.fairshare.holding``), and the gateway decides its priority at that
moment. Within-share requests are never held (the admit stage does not ask).

Room, per pool, over the replicas that can take traffic (healthy, breaker
closed), with C_r the replica's learned batch capacity (``CapacityTracker``,
from the engine's scraped ``running``) and d_r the engine queue depth kept::

    room = Σ (C_r + d_r) − Σ (in_flight_r + others_r) − pending
    others_r = max(0, running_r + waiting_r − in_flight_r), taken at each new scrape
    d_r = engine_queue_depth, or ⌈C_r / 4⌉ when it is automatic

so each engine keeps about d_r requests in its own waiting queue: never empty
while the gateway decides, never long enough to freeze many priorities.
``pending`` counts borrowers let go whose request no replica counts yet.
``others_r`` is what other gateways have on the replica: the engine's count
beyond this gateway's, fixed when a scrape brings new figures. The engine's
figures are not used directly (as ``max(in_flight, running + waiting)``): a
scrape is up to an interval old, and a stale high count would stop dispatch
until the next one while the engine drains, then let a burst go. A
replica whose load is unknown (no fresh scrape) leaves the room unbounded, and
so does a pool with no replica able to take traffic (routing answers that):
nothing is held on a guess.

Worked example: one replica, learned capacity 32, automatic depth 8; in flight
40, the last scrape showed 33 running and 7 waiting while 40 were in flight
(others 0). Room = 40 − 40 − 0 = 0: a
new borrower is held. One request finishes (in flight 39): room 1, the best
held borrower goes; its claim finds its organisation's reservation full, so it
borrows at the priority of its rank now.

Dispatch happens when a request leaves the pool (``freed``), on every
``recheck`` (``run()`` every ``recheck_interval``, which also answers TTLs),
and when a seat of an organisation's reservation frees while it has borrowers
held (``seat_freed``: its oldest goes, and takes the seat if still free).
A full queue (``queue_size``) refuses the newcomer with 503 ``queue_full``,
unless another organisation holds at least two more waiters than the
newcomer's: then that organisation's newest waiter gets the 503 instead, so
one organisation's flood cannot keep every other's borrowers out.
Everything runs on one event loop, without locks. Per request O(log n) queue
work plus one room reading (O(replicas)).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fairgate.admission import CapacityTracker, replica_key
from fairgate.core.clock import Clock
from fairgate.core.errors import GatewayError, GatewayTimeout, ServiceUnavailable
from fairgate.core.replica import ReplicaSnapshot
from fairgate.fairshare.holding import HeldBorrowers, Owner

__all__ = [
    "DEFAULT_RECHECK_INTERVAL",
    "Dispatcher",
    "Grant",
    "HoldObserver",
    "OtherGateways",
    "PoolEngines",
    "automatic_depth",
    "room",
]

_log = logging.getLogger(__name__)

DEFAULT_RECHECK_INTERVAL = 0.25
"""Seconds between re-checks that catch scrapes no release announces, and TTLs."""


def automatic_depth(capacity: float) -> int:
    """The engine queue depth kept by default: a quarter of the batch, at least one.

    It covers the requests counted in flight that the engine does not hold (sent
    and not there yet, finished and still being relayed) and a batch bound by KV
    memory that takes more short requests at once.

    >>> automatic_depth(32), automatic_depth(3)
    (8, 1)
    """
    return max(1, math.ceil(capacity / 4))


def room(
    snapshots: Sequence[ReplicaSnapshot],
    capacities: Mapping[str, float],
    pending: int,
    *,
    depth: int | None = None,
    default_capacity: float = 1.0,
    others: Mapping[str, float] | None = None,
) -> float:
    """Borrowers the pool can take now, ``Σ (C_r + d_r) − Σ (in_flight_r + others_r) −
    pending`` over the replicas that can take traffic; ``math.inf`` when none can take
    traffic or none of them reports its load (nothing is held on a guess).

    A replica whose load is unknown (no fresh scrape) among others whose load is known
    counts at its seats less this gateway's requests there (the others' last count
    went with the scrape): a stale scrape of one replica must not let every held
    borrower of the pool go at once, at the ranks of that moment.

    ``capacities`` maps ``replica_key`` to the learned batch capacity (missing:
    ``default_capacity``); ``depth`` is the engine queue depth per replica (None:
    ``automatic_depth``); ``others`` maps ``replica_key`` to other gateways'
    requests there (missing: 0). O(replicas).

    >>> room([ReplicaSnapshot("e1", "m", in_flight=30, running=33.0, waiting=2.0)],
    ...      {"m/e1": 32.0}, 0, others={"m/e1": 5.0})
    5.0
    """
    others = others or {}
    total = -float(pending)
    counted = False
    for replica in snapshots:
        if not replica.healthy or replica.breaker_open:
            continue
        key = replica_key(replica)
        capacity = capacities.get(key, default_capacity)
        kept = automatic_depth(capacity) if depth is None else depth
        if replica.running is None:  # its load is unknown: its seats, this gateway's use
            total += capacity + kept - replica.in_flight
            continue
        total += capacity + kept - replica.in_flight - others.get(key, 0.0)
        counted = True
    return total if counted else math.inf


class OtherGateways:
    """Per replica, the requests other gateways have there: at each scrape that brings
    new figures, ``running + waiting − in_flight`` (at least 0), kept until the next.

    A new scrape is told from the last by its figures (``running``, ``waiting``,
    ``kv_usage``); one with the same figures changes nothing. O(replicas).

    >>> others = OtherGateways()
    >>> others.observe([ReplicaSnapshot("e1", "m", in_flight=20, running=24.0, waiting=6.0)])
    >>> dict(others.counts())
    {'m/e1': 10.0}
    >>> others.observe([ReplicaSnapshot("e1", "m", in_flight=26, running=24.0, waiting=6.0)])
    >>> dict(others.counts())
    {'m/e1': 10.0}
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float | None, float | None, float | None]] = {}
        self._counts: dict[str, float] = {}

    def observe(self, snapshots: Sequence[ReplicaSnapshot]) -> None:
        for replica in snapshots:
            key = replica_key(replica)
            figures = (replica.running, replica.waiting, replica.kv_usage)
            if self._seen.get(key) == figures:
                continue
            self._seen[key] = figures
            if replica.running is None:
                self._counts.pop(key, None)
                continue
            engine = replica.running + (replica.waiting or 0.0)
            self._counts[key] = max(0.0, engine - replica.in_flight)

    def counts(self) -> Mapping[str, float]:
        return self._counts


@dataclass(frozen=True, slots=True)
class PoolEngines:
    """What the dispatcher reads of one pool: its replicas now, and their learned capacity."""

    snapshots: Callable[[], Sequence[ReplicaSnapshot]]
    tracker: CapacityTracker
    others: OtherGateways = field(default_factory=OtherGateways)


class HoldObserver(Protocol):
    """Receives the dispatcher's measurements, synchronously on the event loop, O(1):

    - ``held(pool, depth)``: borrowers held in the pool now, after each change;
    - ``dispatched(pool, waited)``: a held borrower let go after ``waited`` seconds;
    - ``rejected(pool, reason)``: one refused or gone: ``queue_full``,
      ``queue_timeout``, ``cancelled``.
    """

    def held(self, pool: str, depth: int) -> None: ...

    def dispatched(self, pool: str, waited: float) -> None: ...

    def rejected(self, pool: str, reason: str) -> None: ...


class _NullObserver:
    def held(self, pool: str, depth: int) -> None:
        pass

    def dispatched(self, pool: str, waited: float) -> None:
        pass

    def rejected(self, pool: str, reason: str) -> None:
        pass


_Place = tuple[int, int, float, float]  # a held borrower's key, arrival, enqueued_at, deadline


class Grant:
    """One borrower let go to the engines: pending until ``dispatched()``, then nothing.

    ``waited`` is the time it was held (0.0 when it went at once). Both methods are
    idempotent; ``release()`` after a failure before any replica counted it gives
    the room back and lets the next held borrower go.
    """

    __slots__ = ("_freed", "_place", "_pool", "_state", "for_seat", "waited")

    def __init__(
        self,
        pool: _Pool,
        waited: float,
        freed: Callable[[_Pool], None],
        for_seat: bool = False,
        place: _Place | None = None,
    ) -> None:
        self._pool = pool
        self._freed = freed
        self._state = 0  # 0 pending, 1 dispatched, 2 released
        self.waited = waited
        self.for_seat = for_seat  # let go for a freed seat of its organisation, room or not
        self._place = place  # where it was held (None: it went at once)

    @property
    def pending(self) -> bool:
        return self._state == 0

    def dispatched(self) -> None:
        """A replica's in-flight count includes the request now."""
        if self._state == 0:
            self._state = 1
            self._pool.pending -= 1

    def release(self) -> None:
        """The request is over (or never reached a replica)."""
        was_pending = self._state == 0
        self._state = 2
        if was_pending:
            self._pool.pending -= 1
            self._freed(self._pool)


@dataclass(eq=False, slots=True)
class _Waiter:
    key: int
    org: str
    enqueued_at: float
    deadline: float
    future: asyncio.Future[Grant | GatewayError]
    held: bool = True
    arrival: int = 0  # its place in ``HeldBorrowers``


class _Pool:
    __slots__ = ("arrivals", "engines", "held", "name", "pending")

    def __init__(self, name: str, engines: PoolEngines) -> None:
        self.name = name
        self.engines = engines
        self.held: HeldBorrowers[_Waiter] = HeldBorrowers()
        self.arrivals: OrderedDict[int, _Waiter] = OrderedDict()  # TTL order
        self.pending = 0


class Dispatcher:
    """Holds borrowers of the pools in ``pools`` while they are full; see the module text.

    ``ranks(pool, owners)`` returns the Fair Tree rank now of each owner,
    ``(organisation, team)``, in ``owners`` (synchronous, cheap: the gateway's last
    usage reading; the team is ``""`` without team sub-shares); ``depth`` is
    the engine queue depth kept per replica (None: automatic). ``queue_size`` >= 0
    held borrowers per pool, each at most ``queue_ttl`` > 0 seconds on
    ``clock.monotonic()``. Raises ``ValueError`` on parameters out of range.
    """

    def __init__(
        self,
        pools: Mapping[str, PoolEngines],
        *,
        ranks: Callable[[str, Collection[Owner]], Mapping[Owner, int]],
        clock: Clock,
        queue_size: int,
        queue_ttl: float,
        depth: int | None = None,
        observer: HoldObserver | None = None,
        recheck_interval: float = DEFAULT_RECHECK_INTERVAL,
    ) -> None:
        if queue_size < 0:
            raise ValueError(f"queue_size must be >= 0, got {queue_size!r}")
        if not queue_ttl > 0:
            raise ValueError(f"queue_ttl must be > 0, got {queue_ttl!r}")
        if depth is not None and depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth!r}")
        if not recheck_interval > 0:
            raise ValueError(f"recheck_interval must be > 0, got {recheck_interval!r}")
        self._pools = {name: _Pool(name, engines) for name, engines in pools.items()}
        self._ranks = ranks
        self._clock = clock
        self.queue_size = queue_size
        self.queue_ttl = float(queue_ttl)
        self.depth = depth
        self.recheck_interval = float(recheck_interval)
        self._observer: HoldObserver = observer or _NullObserver()
        self._keys = itertools.count()

    def holds(self, pool: str) -> bool:
        """Does the dispatcher look after ``pool``?"""
        return pool in self._pools

    def held(self, pool: str, org: str | None = None) -> int:
        """Borrowers held in ``pool`` now (of ``org`` only, when given)."""
        p = self._pools.get(pool)
        if p is None:
            return 0
        return len(p.held) if org is None else p.held.held(org)

    def room(self, pool: str) -> float:
        """Borrowers ``pool`` can take now (see ``room``); learns capacities on the way."""
        p = self._pools[pool]
        snapshots = p.engines.snapshots()
        tracker = p.engines.tracker
        tracker.observe(snapshots, self._clock.monotonic())
        p.engines.others.observe(snapshots)
        return room(
            snapshots,
            tracker.capacities(),
            p.pending,
            depth=self.depth,
            default_capacity=tracker.initial,
            others=p.engines.others.counts(),
        )

    def grant_now(self, pool: str) -> Grant | None:
        """A grant at once when nobody is held in ``pool`` (after serving whoever can
        go) and it has room; None when the borrower must wait."""
        p = self._pools[pool]
        self._dispatch(p)
        if len(p.held) or self.room(pool) <= 0:
            return None
        p.pending += 1
        return Grant(p, 0.0, self._dispatch)

    async def wait(
        self, pool: str, org: str, cls: int, team: str = "", again: Grant | None = None
    ) -> Grant:
        """Hold a borrower of ``org`` (class ``cls``: 0 interactive, 1 batch, plus
        ``SEATLESS`` for one that can never take a seat of the reservation; ``team``
        where the organisation has team sub-shares) until it may go.

        Raises ``ServiceUnavailable`` (503, ``queue_full``) when ``queue_size``
        are held already, ``GatewayTimeout`` (504, ``queue_timeout``) after
        ``queue_ttl``. Cancelling the caller takes it out at once (or gives back a
        grant made in the meantime).

        ``again``, a grant this borrower was let go with (released) and that it could
        not use, holds it again at the place it had: ahead of its organisation's later
        arrivals, with its first arrival's deadline (its whole wait stays within
        ``queue_ttl``), and never refused for a full queue (it was counted there).
        ``waited`` then counts from its first arrival. O(held) for such a borrower.
        """
        p = self._pools[pool]
        place = again._place if again is not None else None
        if place is None and len(p.held) >= self.queue_size and not self._push_out(p, org):
            self._observer.rejected(pool, "queue_full")
            raise ServiceUnavailable(
                "Too many requests are waiting for this model's capacity; try again later.",
                code="queue_full",
            )
        future = asyncio.get_running_loop().create_future()
        if place is None:
            now = self._clock.monotonic()
            waiter = _Waiter(next(self._keys), org, now, now + self.queue_ttl, future)
            waiter.arrival = p.held.push(waiter.key, org, cls, waiter, team)
            p.arrivals[waiter.key] = waiter
        else:
            key, arrival, enqueued_at, deadline = place
            waiter = _Waiter(key, org, enqueued_at, deadline, future)
            waiter.arrival = p.held.push(key, org, cls, waiter, team, arrival)
            # keys rise with arrival, so with the deadline: keep the TTL order
            later = [key for key in p.arrivals if key > waiter.key]
            p.arrivals[waiter.key] = waiter
            for key in later:
                p.arrivals.move_to_end(key)
        self._observer.held(pool, len(p.held))
        self._dispatch(p)
        try:
            outcome = await waiter.future
        except asyncio.CancelledError:
            self._abandon(p, waiter)
            raise
        if isinstance(outcome, GatewayError):
            raise outcome
        return outcome

    def freed(self, pool: str) -> None:
        """A request left ``pool`` (or a grant was given back): let whoever fits go."""
        p = self._pools.get(pool)
        if p is not None:
            self._dispatch(p)

    def seat_freed(self, pool: str, org: str, team: str = "") -> None:
        """A within-share seat of ``org`` (of its ``team``'s sub-reservation, with team
        sub-shares) came free: the best held borrower of that owner goes now, room or
        not, to take it (its claim decides; another request may take it first)."""
        p = self._pools.get(pool)
        if p is None:
            return
        while True:
            waiter = p.held.pop_org(org, team)
            if waiter is None:
                return
            if self._let_go(p, waiter, for_seat=True):
                return

    def recheck(self) -> None:
        """Answer held borrowers past their TTL, then let go whoever fits now."""
        for p in self._pools.values():
            self._dispatch(p)

    async def run(self) -> None:
        """Re-check every ``recheck_interval`` seconds until cancelled (a failing re-check
        is logged; stopping would leave the held borrowers to their TTL)."""
        while True:
            await asyncio.sleep(self.recheck_interval)
            try:
                self.recheck()
            except Exception:
                _log.exception("dispatch re-check failed")

    def _dispatch(self, p: _Pool) -> None:
        if not len(p.held):
            return
        self._expire(p, self._clock.monotonic())
        if not len(p.held):
            return
        free = self.room(p.name)
        if free <= 0:
            return
        p.held.rerank(self._ranks(p.name, p.held.owners()))
        while free > 0:
            waiter = p.held.pop()
            if waiter is None:
                return
            if self._let_go(p, waiter):
                free -= 1

    def _let_go(self, p: _Pool, waiter: _Waiter, for_seat: bool = False) -> bool:
        """Grant a waiter taken out of the queue (``for_seat``: for a freed seat of its
        organisation, room or not); False if its caller left meanwhile."""
        self._take_out(p, waiter)
        if waiter.future.done():
            self._observer.rejected(p.name, "cancelled")
            return False
        waited = self._clock.monotonic() - waiter.enqueued_at
        p.pending += 1
        place = (waiter.key, waiter.arrival, waiter.enqueued_at, waiter.deadline)
        waiter.future.set_result(Grant(p, waited, self._dispatch, for_seat, place))
        self._observer.dispatched(p.name, waited)
        return True

    def _expire(self, p: _Pool, now: float) -> None:
        while p.arrivals:
            waiter = next(iter(p.arrivals.values()))
            if waiter.deadline > now:
                return
            p.held.remove(waiter.key)
            self._take_out(p, waiter)
            if waiter.future.done():
                self._observer.rejected(p.name, "cancelled")
                continue
            self._observer.rejected(p.name, "queue_timeout")
            waiter.future.set_result(
                GatewayTimeout(
                    "The request waited too long for capacity for this model.",
                    code="queue_timeout",
                )
            )

    def _push_out(self, p: _Pool, org: str) -> bool:
        """The pool's queue is full: make room for a borrower of ``org`` by refusing the
        newest waiter of the organisation holding the most, if it holds at least two
        more than ``org`` (503 ``queue_full`` to it). False when nobody is pushed out.

        So one organisation flooding the queue fills it only until another's borrower
        comes; then the flood gives way, one waiter at a time, until the queue is
        split evenly among the organisations using it. O(held), only when full."""
        counts: dict[str, int] = {}
        for waiter in p.arrivals.values():
            counts[waiter.org] = counts.get(waiter.org, 0) + 1
        if not counts:
            return False
        biggest = max(counts, key=lambda name: (counts[name], name))
        if biggest == org or counts[biggest] < counts.get(org, 0) + 2:
            return False
        victim = next(w for w in reversed(p.arrivals.values()) if w.org == biggest)
        p.held.remove(victim.key)
        self._take_out(p, victim)
        self._observer.rejected(p.name, "queue_full")
        if not victim.future.done():
            victim.future.set_result(
                ServiceUnavailable(
                    "Too many requests are waiting for this model's capacity; try again later.",
                    code="queue_full",
                )
            )
        return True

    def _take_out(self, p: _Pool, waiter: _Waiter) -> None:
        waiter.held = False
        p.arrivals.pop(waiter.key, None)
        self._observer.held(p.name, len(p.held))

    def _abandon(self, p: _Pool, waiter: _Waiter) -> None:
        if waiter.held:
            p.held.remove(waiter.key)
            self._take_out(p, waiter)
            self._observer.rejected(p.name, "cancelled")
        elif waiter.future.done() and not waiter.future.cancelled():
            outcome = waiter.future.result()
            if isinstance(outcome, Grant):
                outcome.release()
