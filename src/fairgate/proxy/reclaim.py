"""Reclaim: borrowers preempted by the gateway when an owner's requests wait for their seats.

    attempt = reclaimer.enter(replica, ex, ticket)   # sent to the engine (None: not watched)
    ...                                              # the engine's first event came
    reclaimer.opened(attempt, streaming)
    reclaimer.leave(attempt)                         # the attempt is over, whatever happened
    task: await reclaimer.run()                      # a check every ``interval``

vLLM's priority scheduler preempts a running request only when the KV cache runs
short: at ``max_num_seqs`` a waiting request never preempts a running one, whatever
its priority. An organisation coming back to a pool whose seats borrowers took
while it was idle would wait, its requests first in the engine's queue, until the
borrowers finished, and a borrower without an output cap holds its seat until the
total deadline. So the gateway preempts borrowers itself, as Kueue reclaims
borrowed quota.

Per replica, from this gateway's own requests there (``check``):

    starved   = within-share streams sent at least ``after`` seconds ago without
                their first event: the engine has not started them (a plain
                request's start cannot be seen, so it never counts)
    victims   = borrowers that may hold a running seat: a stream past its first
                event, or a plain request; the worst priority first, as vLLM picks,
                and within one priority the streams youngest first, then the plain
                requests oldest first (the youngest are the likeliest to be queued)
    queued    = this gateway's borrower streams without their first event
    excess    = within share + victims − the replica's seats
    need      = min(starved, excess, ⌈engine waiting − queued⌉)

and ``need`` victims are preempted when it is positive. It needs a fresh scrape of
the engine's ``waiting``: without one nothing is preempted, and an engine with
headroom (its ``--max-num-seqs`` above the seats) waits for nothing beyond the
borrowers queued in it, so nothing is preempted there either. A borrower stream
waiting for its first event is never a victim: aborting it frees no running seat.
The starved requests of a replica that preempted get ``after`` seconds more before
they count again, so one episode preempts once, not on every check until the
engine has started them.

A victim's request task is cancelled with ``Exchange.preempted`` set: its upstream
connection is closed (the engine aborts the request), and the pipeline answers its
client (``proxy.pipeline``): 503 ``preempted`` with ``Retry-After`` before any byte,
or an SSE error event of code ``preempted`` that ends the stream. It is never retried
on another replica, and it is charged as any request cut off (``proxy.reservation``).

What it does not see: another gateway's requests. Each gateway preempts only its own
borrowers, counting only its own within-share requests against a replica's seats.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count
from typing import Protocol

from fairgate.proxy.exchange import Exchange

__all__ = ["Attempt", "Reclaimer", "Watched", "choose"]

log = logging.getLogger("fairgate.proxy")


class Watched(Protocol):
    """What the reclaimer reads of a replica (``upstream.Replica`` is one): its names,
    its seats (None: outside fair share) and the engine's scraped waiting requests
    (None: unknown or stale)."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def seats(self) -> float | None: ...
    def engine_waiting(self) -> float | None: ...


@dataclass(eq=False, slots=True)
class Attempt:
    """One request's attempt on a watched replica.

    ``order`` is the arrival order (vLLM's tie-break), ``at`` when it was sent
    (monotonic seconds), ``priority`` the one it was decided (None: no priority);
    ``started`` once a stream's first event came."""

    order: int
    at: float
    within: bool
    stream: bool
    priority: int | None
    pool: str
    org: str
    ex: Exchange | None = None
    task: asyncio.Task[object] | None = field(default=None, repr=False)
    started: bool = False


def choose(
    attempts: Iterable[Attempt],
    seats: float,
    waiting: float | None,
    now: float,
    after: float,
) -> tuple[list[Attempt], list[Attempt]]:
    """The borrowers to preempt on one replica, and the starved within-share attempts
    that asked for them (see the module text); two empty lists when none is needed.

    >>> own = [Attempt(i, 0.0, False, True, 20, "p", "H", started=True) for i in range(2)]
    >>> owner = Attempt(9, 0.0, True, True, 0, "p", "A")
    >>> [a.order for a in choose([*own, owner], 2, 1.0, 5.0, 2.0)[0]]
    [1]
    >>> choose([*own, owner], 2, 0.0, 5.0, 2.0)     # the engine has headroom
    ([], [])
    """
    if waiting is None:
        return [], []  # no fresh reading: nothing says the owner's requests are queued
    within = 0
    queued = 0  # this gateway's borrower streams not started: in the engine's queue (or prefill)
    starved: list[Attempt] = []
    victims: list[Attempt] = []
    for a in attempts:
        if a.within:
            within += 1
            if a.stream and not a.started and now - a.at >= after:
                starved.append(a)
        elif a.started or not a.stream:
            victims.append(a)
        else:
            queued += 1
    if not starved or not victims:
        return [], []
    # what the engine holds waiting beyond this gateway's own queued borrowers: the owner's
    # starved streams can only be among those
    need = min(
        len(starved),
        math.ceil(within + len(victims) - seats - 1e-9),
        math.ceil(waiting - queued - 1e-9),
    )
    if need <= 0:
        return [], []
    # vLLM preempts the largest (priority, arrival): the worst-ranked borrower, youngest first
    victims.sort(key=_victim_order)
    return victims[-need:][::-1], starved


def _victim_order(a: Attempt) -> tuple[int, int, int]:
    """Ascending: the last is preempted first. The worst priority first, as vLLM picks;
    within one priority, a stream past its first event (it surely holds a seat), youngest
    first, before a plain request, oldest first: the youngest plain borrowers are the
    ones the dispatcher keeps queued in the engine, and preempting those frees nothing
    (the dispatcher sends the next, which would be the next victim, for ever)."""
    priority = _UNRANKED if a.priority is None else a.priority
    return (priority, 1, a.order) if a.stream else (priority, 0, -a.order)


_UNRANKED = 1 << 30  # a borrower sent without a priority ranks last


class Reclaimer:
    """Watches the fair-share attempts on replicas with seats and preempts borrowers.

    ``after`` > 0 seconds an owner's request waits before borrowers are preempted for
    it; ``on_preempt(pool, org)`` counts each preemption (a metric); ``interval`` is
    the time between checks (default: a quarter of ``after``, within 0.05–0.5 s).
    Everything runs on one event loop."""

    def __init__(
        self,
        after: float,
        *,
        on_preempt: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float | None = None,
    ) -> None:
        if not after > 0:
            raise ValueError(f"after must be > 0, got {after!r}")
        self.after = float(after)
        self.interval = (
            float(interval) if interval is not None else max(0.05, min(0.5, self.after / 4))
        )
        self.retry_after = max(1, math.ceil(self.after))
        self._on_preempt = on_preempt
        self._clock = clock
        self._orders = count()
        self._watched: dict[Watched, dict[int, Attempt]] = {}

    def enter(
        self,
        replica: Watched,
        ex: Exchange,
        pool: str | None,
        org: str,
        within: bool,
        priority: int | None,
    ) -> Attempt | None:
        """Watch an attempt of ``ex`` on ``replica`` from now (it is being sent); None
        when it is not fair share's or the replica has no seats."""
        if pool is None or replica.seats is None:
            return None
        task = asyncio.current_task()
        attempt = Attempt(
            next(self._orders), self._clock(), within, ex.stream, priority, pool, org, ex, task
        )
        on = self._watched.get(replica)
        if on is None:
            on = self._watched[replica] = {}
        on[attempt.order] = attempt
        return attempt

    def opened(self, replica: Watched, attempt: Attempt | None, streaming: bool) -> None:
        """The engine answered: a stream's first event came (it runs), or a plain answer
        came whole (nothing left to preempt nor to wait for)."""
        if attempt is None:
            return
        if streaming:
            attempt.started = True
        else:
            self.leave(replica, attempt)

    def leave(self, replica: Watched, attempt: Attempt | None) -> None:
        if attempt is None:
            return
        on = self._watched.get(replica)
        if on is not None:
            on.pop(attempt.order, None)
            if not on:
                del self._watched[replica]

    def watching(self, replica: Watched) -> Sequence[Attempt]:
        return tuple(self._watched.get(replica, {}).values())

    def check(self) -> list[Attempt]:
        """Preempt what each watched replica needs now; returns the victims."""
        now = self._clock()
        preempted: list[Attempt] = []
        for replica, on in list(self._watched.items()):
            seats = replica.seats
            if seats is None:
                continue
            victims, starved = choose(on.values(), seats, replica.engine_waiting(), now, self.after)
            if not victims:
                continue
            for a in starved:
                a.at = now  # one episode, one preemption: they count again after ``after``
            for victim in victims:
                if self._preempt(replica, victim, len(starved)):
                    preempted.append(victim)
        return preempted

    def _preempt(self, replica: Watched, victim: Attempt, starved: int) -> bool:
        self.leave(replica, victim)
        ex, task = victim.ex, victim.task
        if (
            ex is None
            or task is None
            or task.done()
            or ex.complete
            or ex.preempted is not None
            or ex.revoked is not None  # already being cut (proxy.in_flight)
        ):
            return False
        ex.preempted = float(self.retry_after)
        task.cancel()
        log.warning(
            "fair share: request %s of %s (borrowing, priority %s) preempted on replica %s/%s: "
            "%d within-share request(s) waited %.1fs or more for its seats",
            ex.request_id,
            victim.org,
            victim.priority,
            replica.model,
            replica.name,
            starved,
            self.after,
        )
        if self._on_preempt is not None:
            self._on_preempt(victim.pool, victim.org)
        return True

    async def run(self) -> None:
        """Check every ``interval`` seconds until cancelled (a failing check is logged)."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.check()
            except Exception:
                log.exception("fair-share reclaim check failed")
