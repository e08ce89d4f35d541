"""The admit stage: an admission lease and a fair-share claim (and the dispatcher).

    ahead = admit.claim_ahead(ex)      # before the limit stage: the claim may ride with it
    await limit.enter(ex, ticket, ahead)
    await admit.enter(ex, ticket)      # ServiceUnavailable 503, 504
    ...                                # route, relay; ticket.dispatched()
    await admit.leave(ticket, ex)      # by the settle stage, whatever happened

Each part only when configured for the request's model:

1. admission: a lease from the pool's admission controller, waiting in the
   team's band while the pool is saturated, its tenant the team (so a team's
   keys share one turn of the round-robin) (``fairgate.admission``); a queue
   that orders by fair-share priority gets a provisional one from this
   gateway's own counts (no slot is held while waiting);
2. fair share: one atomic claim of a within-share slot of the organisation in
   the model's pool (with team sub-shares: of the team's sub-reservation, else
   of the organisation's unused seats), then the priority the policy decides
   (``FairShare.decision``), which goes to the engine (vLLM's ``X-Vllm-Priority``);
3. dispatch: a borrower finding its pool full waits in the gateway's own
   queue (``fairgate.proxy.dispatch``) and is claimed again when it may go,
   so its priority is the one its organisation ranks at that moment.

The order of 1 and 2 depends on whether the request can be admitted at once. The
Gateway wires ``claims_ride``: when the band has room (``claim_ahead``), the claim
rides in the limit stage's call to the state back end (one round trip for limits
and claim, made only if every limit was charged), and ``enter`` then takes the
lease from the same saturation reading: claim, then lease. When the band is full
(or claims do not ride), ``enter`` waits for the lease holding no slot, then
claims: lease, then claim. A claim that rode and then finds the band filled
meanwhile is given back before the wait (``_drop_ahead``), so no request ever
waits in admission holding a within-share slot.

``leave`` gives the lease and the fair-share slot back and charges the request's
cost to the organisation's decayed usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Generic, TypeVar

from fairgate.admission import AdmissionController, Bands, Reading
from fairgate.core.clock import Clock
from fairgate.core.money import Money
from fairgate.fairshare import FairShare, PriorityClass
from fairgate.fairshare.holding import SEATLESS, Owner
from fairgate.limits import StateUnavailable
from fairgate.limits.demand import Admission
from fairgate.limits.fairshare_state import (
    Claim,
    ClaimRequest,
    FairShareState,
    Split,
    UsageCharge,
)
from fairgate.proxy.dispatch import Dispatcher, Grant
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.ticket import Due, Ticket

__all__ = ["USAGE_TTL", "Admit"]

log = logging.getLogger("fairgate.proxy")

T = TypeVar("T")

_FREE = Money(0)

_LOST = StateUnavailable("the way-out call (slot release, usage charge) failed")

USAGE_TTL = 0.1
"""Seconds a pool's decayed usage is reused between reads: at most ten reads a second per
pool and gateway, whatever the traffic, instead of a round trip per request. Not longer:
the ranking steers a feedback loop (a borrower's rank moves what its organisation consumes,
which moves the rank), and a stale reading keeps an organisation ranked first after its
usage passed its share, for half the TTL on average. With requests sent to the engine at
once, the organisation ranked first takes most of the borrowed seats, so its usage rises
fast and every tenth of a second it stays first overshoots its share (a 1 s TTL measured
B's decayed part of the usage swinging up to 0.226-0.245 for a share of 0.1875; 0.1 s,
up to 0.211: docs/scaling.md). A reading is good until the end of its ``USAGE_TTL`` slot
of the wall clock, not for ``USAGE_TTL`` from when it was taken: every gateway of a fleet
then re-reads at the same instants and ranks borrowers alike (staggered readings would
leave them disagreeing about which organisation ranks first for part of every slot)."""


class _PoolUsage(Generic[T]):
    """A pool's decayed usage (per organisation, or per team), re-read at most every
    ``USAGE_TTL``."""

    __slots__ = ("at", "cost", "reading", "value")

    def __init__(self, empty: T) -> None:
        self.value: T = empty
        self.at = -USAGE_TTL
        self.reading: asyncio.Future[T] | None = None
        self.cost = 0.0  # moving mean of a finished request's cost units (held pools only)


class Admit:
    """Admission and fair share for every request, built once by the Gateway.

    ``pools`` maps each canonical model to its pool (None: no pool); fair share
    applies to models whose pool ``fairshare`` knows, admission to models whose
    pool (or, without one, the model's own name) has a controller in
    ``admission``. ``classes`` maps a model to ``interactive``/``batch``.

    ``claims_ride`` says the limit stage's back end is ``fairshare_state``: the claim
    may then ride with the limits (``claim_ahead``), and what ``leave`` owes the state
    is left on the ticket (``Ticket.due``) for the limit stage's settle to pay in its
    own call; ``finish`` pays what it did not. Without it ``leave`` pays at once.
    """

    def __init__(
        self,
        *,
        pools: Mapping[str, str | None],
        classes: Mapping[str, str],
        clock: Clock,
        fairshare: FairShare | None = None,
        fairshare_state: FairShareState | None = None,
        admission: Mapping[str, AdmissionController] | None = None,
        bands: Bands | None = None,
        send_priority: bool = True,
        on_claim: Callable[[str, str, bool], None] | None = None,
        dispatcher: Dispatcher | None = None,
        claims_ride: bool = False,
    ) -> None:
        self.pools = pools
        self._classes = classes
        self._clock = clock
        self.policy = fairshare if fairshare_state is not None else None
        self.state = fairshare_state
        self.fair_pools = frozenset(fairshare.pools) if fairshare is not None else frozenset()
        self._admission = dict(admission or {})
        self._bands = bands
        self._send_priority = send_priority
        self._on_claim = on_claim  # (pool, org, borrowing), for a metric
        self._usage: dict[str, _PoolUsage[dict[str, float]]] = {}
        self._team_usage: dict[str, _PoolUsage[dict[str, dict[str, float]]]] = {}
        self.in_flight: dict[tuple[str, str], list[int]] = {}  # (pool, org) → [within, borrowing]
        self._state_down = False
        self._dispatcher = dispatcher
        self._ride = claims_ride and fairshare_state is not None
        # the band and saturation reading claim_ahead found, and for which request
        self._ahead: tuple[Exchange, str, Reading | None] | None = None

    @property
    def available(self) -> bool:
        """False while the fair-share state failed its last call, on the way in or out
        (with ``claims_ride``, the limit stage's calls that carried the claim or paid
        the way out)."""
        return not self._state_down

    def claim_ahead(self, ex: Exchange) -> ClaimRequest | None:
        """The fair-share claim the limit stage may make in its own call for ``ex``, so
        that the limits and the claim cost one round trip; None when none is wanted
        (no fair share for the model, claims do not ride) or it cannot be made yet:
        the request may have to wait in admission, where it holds no slot (then
        ``enter`` claims after the wait, as without riding). Synchronous, no I/O."""
        if not self._ride:
            return None
        principal = ex.principal
        assert principal is not None
        pool = self.pools.get(ex.requested_model)
        if pool is None or pool not in self.fair_pools:
            return None
        controller = self._admission.get(pool)
        bands = self._bands
        if controller is not None and bands is not None:
            band = bands.for_team(principal.team)
            reading = None if band.never_held else controller.reading()
            if not controller.has_room(band.name, reading):
                return None
            # enter's try_admit takes the reading again if nothing else ran meanwhile
            # (the limit stage did not await): one saturation reading for the request
            self._ahead = (ex, band.name, reading)
        if ex.sequences > 1:
            return None  # never within share (``_claim``): nothing to claim
        policy = self.policy
        assert policy is not None
        org, team = principal.org, principal.team
        reservation = policy.reservations(pool).get(org, 0)
        return ClaimRequest(pool, org, reservation, _split(policy, pool, org, team), team)

    async def enter(self, ex: Exchange, ticket: Ticket) -> None:
        """Admit ``ex`` (limits charged onto ``ticket``) or raise its refusal; what it
        took is on ``ticket`` (given back here when it raises)."""
        principal = ex.principal
        assert principal is not None
        model = ex.requested_model
        pool = self.pools.get(model)
        controller = self._admission.get(pool or model)
        fair = pool is not None and pool in self.fair_pools
        if not fair and controller is None:
            return  # nothing to take
        try:
            if controller is not None and self._bands is not None:
                # Admission first: a request waiting in the gateway's queue holds no
                # within-share slot (its organisation's running requests keep them).
                # A queue that orders waiters by priority gets this gateway's best
                # guess now; the slot and the priority the engine sees are decided
                # when the request leaves the queue.
                ahead, self._ahead = self._ahead, None
                reading = None
                if ahead is not None and ahead[0] is ex:
                    _, band, reading = ahead
                else:
                    band = self._bands.for_team(principal.team).name
                waiting_priority = 0
                if fair and controller.order_by_priority:
                    assert pool is not None
                    waiting_priority = await self._provisional(
                        pool, principal.org, model, self._now(), ex.sequences
                    )
                lease = None
                if ticket.ahead:
                    # granted at once, or the band filled since the claim rode along:
                    # then wait holding no slot
                    lease = controller.try_admit(
                        band=band, tenant=principal.team, priority=waiting_priority, reading=reading
                    )
                    if lease is None:
                        await self._drop_ahead(ticket)
                if lease is None:
                    lease = await controller.admit(
                        band=band, tenant=principal.team, priority=waiting_priority
                    )
                ticket.lease = lease
            if fair:
                assert pool is not None
                ticket.team = principal.team
                now = self._clock.wall()
                await self._claim(ticket, pool, principal.org, model, now, ex.sequences)
                if ticket.borrowing and ticket.claim is not None and self._dispatcher is not None:
                    await self._dispatch(ticket, pool, principal.org, model, ex.sequences)
                if self._on_claim is not None:
                    self._on_claim(pool, principal.org, ticket.borrowing)
        except BaseException:
            await self._give_back(ticket, _FREE)
            raise
        if self._send_priority:
            ex.priority = ticket.priority

    async def leave(self, ticket: Ticket, ex: Exchange) -> None:
        """Give back the lease and the fair-share slot ``ticket`` holds and charge
        ``ex.cost`` (the real usage's, set by the settle stage; nothing when no engine
        was reached) to the organisation's usage. With ``claims_ride`` the slot and the
        charge are left on the ticket for the limit stage's settle (``finish`` after
        it pays what it left). Never raises but ``CancelledError``; safe to call twice."""
        await self._give_back(ticket, ex.cost)

    async def finish(self, ticket: Ticket, ex: Exchange | None = None) -> None:
        """Pay what ``ticket`` still owes the fair-share state (``Ticket.due``: what the
        limit stage's settle did not pay), then tell the dispatcher of the seat freed.
        Never raises but ``CancelledError``; safe to call twice."""
        due, ticket.due = ticket.due, None
        if due is None:
            return
        if due.answered is not None:  # the limit stage's call paid it, or failed to
            lost = None if due.answered else _LOST
            if lost is not None or self._state_down:  # note_state's change, once a request
                self.note_state(lost)
        if due.claim is not None or due.charge is not None:
            await self._pay(due)
        dispatcher = self._dispatcher
        if dispatcher is not None and due.seat is not None:
            dispatcher.seat_freed(*due.seat)

    async def _give_back(self, ticket: Ticket, cost: Money) -> None:
        lease, ticket.lease = ticket.lease, None
        if lease is not None:
            lease.release()
        grant, ticket.grant = ticket.grant, None
        if grant is not None:
            grant.release()
        # a claim that rode along, never taken over
        stray = self._take_ahead(ticket) if ticket.ahead else None
        if stray is not None and stray.claim is not None:
            ridden, stray.claim = stray.claim, None
            if ridden.lease is not None:
                await self._owe(ticket, Due(ridden, None))
        if ticket.pool is None:
            return
        pool, org = ticket.pool, ticket.org
        counts = self.in_flight.get((pool, org))
        if counts is not None:
            counts[1 if ticket.borrowing else 0] -= 1
        claim, ticket.claim, ticket.pool = ticket.claim, None, None
        dispatcher = self._dispatcher
        if dispatcher is not None and dispatcher.holds(pool):
            # the ranks of the next dispatch count this request's cost already
            self._charged_here(pool, org, cost)
            dispatcher.freed(pool)
        seat = None
        if dispatcher is not None and claim is not None and claim.within_share:
            seat = (pool, org, self._owner_team(ticket))
        await self._owe(ticket, Due(claim, self._usage_charge(pool, org, cost, ticket.team), seat))

    async def _owe(self, ticket: Ticket, due: Due) -> None:
        """Leave ``due`` on the ticket for the limit stage's settle, or pay it now when
        claims do not ride (or something is owed already)."""
        if ticket.due is not None:
            await self.finish(ticket)
        ticket.due = due
        if not self._ride:
            await self.finish(ticket)

    def _usage_charge(
        self, pool: str, org: str, cost: Money | None, team: str | None
    ) -> UsageCharge | None:
        """The charge of ``cost`` to ``org``'s usage in ``pool``; None when it cost nothing."""
        if cost is None or cost.micro <= 0 or self.policy is None:
            return None
        return UsageCharge(pool, org, cost.micro / 1_000_000, self.policy.half_life, team)

    @staticmethod
    def _take_ahead(ticket: Ticket) -> Admission | None:
        """The limits admission holding the claim that rode along, once; None when none did."""
        if not ticket.ahead:
            return None
        ticket.ahead = False
        return ticket.limits

    async def _drop_ahead(self, ticket: Ticket) -> None:
        """Give back at once the slot of a claim that rode along (the request will wait)."""
        ridden = self._take_ahead(ticket)
        claim = None if ridden is None else ridden.claim
        if ridden is not None:
            ridden.claim = None
        if claim is not None and claim.lease is not None:
            await self._pay(Due(claim, None))

    def _now(self) -> float:
        return self._clock.wall()

    async def _claim(
        self, ticket: Ticket, pool: str, org: str, model: str, now: float, sequences: int = 1
    ) -> None:
        """Take a within-share slot of ``org`` in ``pool`` onto ``ticket``, or borrow, and
        decide the request's priority.

        A slot is one engine sequence's seat, and a claim takes one slot: a request that
        runs several sequences (``n``, ``best_of``, several prompts) never claims and
        always borrows, ranked by its organisation's usage. Claimed as one slot, such a
        request would run up to ``max_prompts × max_n`` sequences on one reserved seat
        at the within-share priority, ahead of every other organisation's."""
        assert self.policy is not None and self.state is not None
        policy = self.policy
        claim: Claim | None = None
        ridden = self._take_ahead(ticket)
        if sequences > 1:
            # a borrower, holding nothing; with the state down, at the lowest rank, as
            # every request then
            claim = None if self._state_down else Claim(pool, org, False, 0, None, now)
        elif ridden is not None:  # made by the limit stage's call (``claim_ahead``)
            claim, ridden.claim = ridden.claim, None
            # Without the shared count no reservation can be proven: borrow, at the
            # lowest rank (the safe answer), and serve the request.
            if ridden.unavailable is not None or self._state_down:  # as note_state checks
                self.note_state(ridden.unavailable)
        else:
            reservation = policy.reservations(pool).get(org, 0)
            split = _split(policy, pool, org, ticket.team)
            try:
                claim = await self.state.claim(pool, org, reservation, now, split, ticket.team)
            except StateUnavailable as exc:
                self.note_state(exc)  # borrow, as above
            else:
                self.note_state(None)
        # Held from here on: whatever happens next (a cancelled await included), leave()
        # gives the slot back.
        ticket.pool, ticket.org, ticket.claim = pool, org, claim
        ticket.borrowing = claim is None or not claim.within_share
        counts = self.in_flight.setdefault((pool, org), [0, 0])
        counts[1 if ticket.borrowing else 0] += 1
        usage: dict[str, float] | None = None
        by_team: dict[str, dict[str, float]] | None = None
        if claim is not None and not claim.within_share:
            # a borrower is ranked by the pool's usage
            try:
                usage = self._ranked(pool, await self.pool_usage(pool, now), now)
                if policy.has_team_shares:
                    by_team = await self._pool_team_usage(pool, now)
            except StateUnavailable as exc:
                self.note_state(exc)
                usage = {}
                if sequences > 1:  # its claim was not the state's: the lowest rank
                    claim = ticket.claim = None
        decision = policy.decision(
            pool,
            org,
            _class(self._classes.get(model)),
            within_share=None if claim is None else claim.within_share,
            in_org=claim is not None and claim.in_org,
            usage_by_org=usage,
            team=ticket.team,
            usage_by_team=by_team,
        )
        ticket.priority, ticket.rank = decision.priority, decision.rank

    async def _dispatch(
        self, ticket: Ticket, pool: str, org: str, model: str, sequences: int = 1
    ) -> None:
        """A borrower in a full pool waits in the dispatcher's queue, holding no claim, and
        is claimed again when it may go: within share if a seat of its organisation came
        free meanwhile, else borrowing at the rank its organisation has then.

        Let go for a freed seat of its organisation (room or not) and finding the seat
        taken by another request first (its organisation's next request, often), it
        waits again while the pool is full: sent as a borrower, it would pass every
        better-ranked borrower held, and an organisation abandoning streams and sending
        again at once jumped the queue this way. It waits again at the place it had,
        ahead of its organisation's later borrowers, and within the ``queue_ttl`` of its
        first arrival: being let go for nothing must not cost it its turn or restart
        its clock."""
        dispatcher = self._dispatcher
        assert dispatcher is not None
        if not dispatcher.holds(pool):
            return
        ticket.grant = dispatcher.grant_now(pool)
        if ticket.grant is not None:
            return
        cls = int(_class(self._classes.get(model)))
        if sequences > 1:
            cls += SEATLESS  # a freed seat of its organisation must not pick it: it cannot sit
        if ticket.lease is not None:
            ticket.lease.dispatched()  # admission: held here, it is not pending there
        grant: Grant | None = None
        while True:
            # Give back what the claim counted (a borrowing claim holds no slot in the state).
            counts = self.in_flight.get((pool, org))
            if counts is not None:
                counts[1] -= 1
            ticket.pool, ticket.claim, ticket.priority, ticket.rank = None, None, None, None
            ticket.borrowing = False
            grant = ticket.grant = await dispatcher.wait(
                pool, org, cls, self._owner_team(ticket), again=grant
            )
            ticket.held = grant.waited  # from its first arrival, waited again or not
            await self._claim(ticket, pool, org, model, self._clock.wall(), sequences)
            if not (
                grant.for_seat
                and ticket.borrowing
                and ticket.claim is not None
                and dispatcher.room(pool) < 0  # counting this grant: no room for it
            ):
                return
            ticket.grant = None
            grant.release()

    def _owner_team(self, ticket: Ticket) -> str:
        """The team a held borrower is ranked and queued under: its own where teams have
        sub-shares (they rank too), else none."""
        teams = self.policy is not None and self.policy.has_team_shares
        return (ticket.team or "") if teams else ""

    def ranks_now(self, pool: str, owners: Collection[Owner]) -> dict[Owner, int]:
        """The Fair Tree rank of each owner, ``(organisation, team)``, in ``pool`` from the
        last usage reading, this gateway's charges since and its requests in flight
        (synchronous; for the dispatcher). Teams rank inside their organisation where it
        has team sub-shares (from the last team usage reading)."""
        policy = self.policy
        assert policy is not None
        entry = self._usage.get(pool)
        usage = dict.fromkeys({org for org, _ in owners}, 0.0)
        if entry is not None:
            usage.update(self._ranked(pool, entry.value, self._now()))
        teams = self._team_usage.get(pool)
        by_team = teams.value if teams is not None else None
        return policy.ranks(pool, owners, usage, usage_by_team=by_team)

    def _ranked(self, pool: str, usage: dict[str, float], now: float) -> dict[str, float]:
        """The usage a borrower's rank reads: ``usage`` (the last reading, with this
        gateway's charges since) and, where the dispatcher holds the pool, this gateway's
        requests in flight, each counted at the pool's mean cost of a request until it
        finishes and is charged for real.

        Counting what runs, as Slurm charges running jobs, makes a rank follow a
        dispatch at once instead of a request's lifetime later; nothing is charged
        for it, it only ranks. A request waiting in an engine's queue counts as one
        running: it will be charged its tokens in full whatever the time it queued, so
        leaving it out would rank its organisation by less than it is about to have
        used (docs/fairshare.md)."""
        dispatcher = self._dispatcher
        entry = self._usage.get(pool)
        if (
            dispatcher is None
            or not dispatcher.holds(pool)
            or entry is None
            or entry.cost <= 0
            or entry.at < 0
        ):
            return usage
        assert self.policy is not None
        weight = _weight(now - entry.at, self.policy.half_life) * entry.cost
        ranked = dict(usage)
        for (p, org), (within, borrowing) in self.in_flight.items():
            if p == pool and within + borrowing > 0:
                ranked[org] = ranked.get(org, 0.0) + (within + borrowing) * weight
        return ranked

    def _charged_here(self, pool: str, org: str, cost: Money) -> None:
        """Add a finished request's cost to the cached usage of ``pool`` until the next
        reading brings it from the state back end (which ``charge`` updates)."""
        entry = self._usage.get(pool)
        if entry is None or cost.micro <= 0 or entry.at < 0 or self.policy is None:
            return
        units = cost.micro / 1_000_000
        entry.cost = units if entry.cost <= 0 else entry.cost + (units - entry.cost) / 32
        # The cache holds values decayed to ``entry.at``; a charge now weighs more by
        # the decay since then (ranks compare ratios, so only that weighting matters).
        value = dict(entry.value)
        value[org] = value.get(org, 0.0) + units * _weight(
            self._now() - entry.at, self.policy.half_life
        )
        entry.value = value

    async def _provisional(
        self, pool: str, org: str, model: str, now: float, sequences: int = 1
    ) -> int:
        """The priority a waiter of ``org`` would get if its turn came now, from this
        gateway's own within-share count (no slot is taken; a request of several
        sequences borrows whatever that count)."""
        assert self.policy is not None
        cls = _class(self._classes.get(model))
        within = self.in_flight.get((pool, org), (0, 0))[0]
        if sequences > 1:
            within = max(within, self.policy.reservations(pool).get(org, 0))
        usage: dict[str, float] = {}
        if not self.policy.within_reservation(pool, org, within):
            with contextlib.suppress(StateUnavailable):  # ranked as if nobody had used it
                usage = await self.pool_usage(pool, now)
        return self.policy.decide(pool, org, cls, within, usage).priority

    async def pool_usage(self, pool: str, now: float) -> dict[str, float]:
        """The pool's decayed usage per organisation, re-read at most every ``USAGE_TTL``;
        ``StateUnavailable`` when the back end does not answer."""
        assert self.state is not None and self.policy is not None
        state, half_life = self.state, self.policy.half_life
        entry = self._usage.get(pool)
        if entry is None:
            entry = self._usage[pool] = _PoolUsage({})
        return await _cached(entry, now, lambda: state.usage(pool, now, half_life))

    async def _pool_team_usage(self, pool: str, now: float) -> dict[str, dict[str, float]]:
        assert self.state is not None and self.policy is not None
        state, half_life = self.state, self.policy.half_life
        entry = self._team_usage.get(pool)
        if entry is None:
            entry = self._team_usage[pool] = _PoolUsage({})
        return await _cached(entry, now, lambda: state.team_usage(pool, now, half_life))

    async def _pay(self, due: Due) -> None:
        assert self.state is not None
        try:
            if due.claim is not None:
                await self.state.release(due.claim)
            c = due.charge
            if c is not None:
                await self.state.charge(
                    c.pool, c.org, c.cost_units, self._now(), c.half_life, team=c.team
                )
        except StateUnavailable as exc:
            # The slot expires by itself (lease TTL); the usage charge is lost.
            self.note_state(exc)

    def note_state(self, exc: StateUnavailable | None) -> None:
        """Note whether the fair-share state answered its last call (logged on change)."""
        if exc is not None and not self._state_down:
            self._state_down = True
            log.error("fair-share state unavailable, requests borrow meanwhile: %s", exc)
        elif exc is None and self._state_down:
            self._state_down = False
            log.warning("fair-share state available again")

    def fairshare_counts(self) -> Mapping[tuple[str, str], tuple[int, int]]:
        """This process's (within share, borrowing) requests in flight per (pool, org)."""
        return {key: (c[0], c[1]) for key, c in self.in_flight.items()}


async def _cached(entry: _PoolUsage[T], now: float, read: Callable[[], Awaitable[T]]) -> T:
    """``entry``'s value, re-read with ``read`` once the ``USAGE_TTL`` slot of the wall clock
    it was read in has passed; one read at a time (the others take the last value, or wait
    for the first one)."""
    if entry.at >= 0 and _slot(now) == _slot(entry.at):
        return entry.value
    if entry.reading is not None:
        if entry.at >= 0:
            return entry.value  # someone is reading; the last value will do
        return await asyncio.shield(entry.reading)
    entry.reading = asyncio.ensure_future(read())
    try:
        entry.value = await asyncio.shield(entry.reading)
        entry.at = now
    finally:
        entry.reading = None
    return entry.value


def _slot(at: float) -> int:
    """The ``USAGE_TTL`` slot of the wall clock ``at`` falls in."""
    return math.floor(at / USAGE_TTL)


def _split(policy: FairShare, pool: str, org: str, team: str | None) -> Split | None:
    """Where a request of ``team`` claims when ``org`` has team sub-shares; else None."""
    group = policy.group(org, team)
    if group is None:
        return None
    seats = policy.team_reservations(pool, org)
    return Split(group, seats.get(group, 0), tuple(policy.team_shares(org)))


def _weight(age: float, half_life: float) -> float:
    """How much more a cost charged ``age`` seconds after a reading weighs than the
    reading's values: ``2 ** (age / half_life)``, capped far below overflow."""
    return math.exp(min(700.0, math.log(2) * max(0.0, age) / half_life))


def _class(name: str | None) -> PriorityClass:
    return PriorityClass.BATCH if name == "batch" else PriorityClass.INTERACTIVE
