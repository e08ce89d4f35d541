"""The stages between identification and routing: limits and budgets, fair share, admission.

    ticket = await gate.enter(ex)          # RateLimited 429, ServiceUnavailable 503, 504
    try:
        ...                                # route, forward, relay; ticket.dispatched()
    finally:
        await gate.leave(ticket, ex)       # by the settle stage, whatever happened (proxy.settle)

``enter`` runs, in this order, each only when configured for the request:

1. limits and budgets: one atomic check-and-charge of the key's rate limits and
   of every budget the request falls under, at the estimated tokens and cost
   (``fairgate.limits``); a refusal names the limit or the budget;
2. admission: a lease from the pool's admission controller, waiting in the
   team's band while the pool is saturated, its tenant the team (so a team's
   keys share one turn of the round-robin) (``fairgate.admission``); a queue
   that orders by fair-share priority gets a provisional one from this
   gateway's own counts (no slot is held while waiting);
3. fair share: one atomic claim of a within-share slot of the organisation in
   the model's pool (with team sub-shares: of the team's sub-reservation, else
   of the organisation's unused seats), then the priority
   (``fairgate.fairshare``), which goes to the engine (vLLM's ``X-Vllm-Priority``);
4. dispatch: a borrower finding its pool full waits in the gateway's own
   queue (``fairgate.proxy.dispatch``) and is claimed again when it may go,
   so its priority is the one its organisation ranks at that moment.

``leave`` gives everything back and corrects the charges with the real usage:
the admission lease, the fair-share slot (and the request's cost is charged to
the organisation's decayed usage), the in-flight slot, tokens and cost.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from fairgate.accounting import Prices, TokenCounts
from fairgate.admission import AdmissionController, Bands
from fairgate.admission.lease import Lease
from fairgate.core.clock import Clock
from fairgate.core.errors import BadRequest, RateLimited, ServiceUnavailable
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.fairshare import MAX_RANK, FairShare, PriorityClass
from fairgate.fairshare.holding import Owner
from fairgate.fairshare.priority import decide
from fairgate.fairshare.tree import dense_ranks, level_fairshare
from fairgate.limits import Budget, BudgetBook, Demand, Limiter, Limits, StateUnavailable, Subject
from fairgate.limits.demand import Admission
from fairgate.limits.fairshare_state import Claim, FairShareState, Split
from fairgate.limits.head import HeadGate
from fairgate.proxy.dispatch import Dispatcher, Grant
from fairgate.proxy.exchange import Exchange

__all__ = ["Gate", "TagPolicy", "Ticket"]

log = logging.getLogger("fairgate.proxy")

T = TypeVar("T")

USAGE_TTL = 1.0
"""Seconds a pool's decayed usage is reused between reads (a ranking a second old is as
good as a fresh one at a half-life of days, and it saves a round trip per request)."""

_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")

Alert = Callable[[Budget, float, Money], None]
"""Called once per budget whose soft limit a reservation crossed: (budget, now, spent)."""


@dataclass(frozen=True, slots=True)
class TagPolicy:
    """Tags a request may add through its one tag header (``header``): at most ``limit``,
    each in ``allowed`` (every organisation's) or in ``by_org`` of the caller's
    organisation. Nothing listed: the header may carry no tag."""

    limit: int = 8
    allowed: frozenset[str] = frozenset()
    by_org: Mapping[str, frozenset[str]] = field(default_factory=dict)
    header: str = "x-fairgate-tags"

    def parse(self, raw: bytes, org: str = "") -> tuple[str, ...]:
        """The header's comma-separated tags, de-duplicated in order; ``BadRequest``
        (400) for too many, a malformed or a tag not allowed to ``org``'s keys."""
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise BadRequest("tags must be ASCII", code="invalid_tag") from None
        tags = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if len(tags) > self.limit:
            raise BadRequest(
                f"a request may carry at most {self.limit} tags, this one has {len(tags)}",
                code="too_many_tags",
            )
        for tag in tags:
            if not _TAG.fullmatch(tag):
                raise BadRequest(
                    "a tag is 1 to 64 of the characters A-Z a-z 0-9 . _ : / - "
                    "and starts with a letter or digit",
                    code="invalid_tag",
                )
            if tag not in self.allowed and tag not in self.by_org.get(org, ()):
                # the message names the header, never what another tenant may send
                raise BadRequest(
                    f"tag '{tag}' in the {self.header} header is not allowed for this key",
                    code="tag_not_allowed",
                )
        return tags


@dataclass(slots=True)
class Ticket:
    """What one request holds between ``Gate.enter`` and ``Gate.leave``."""

    limits: Admission | None = None
    pool: str | None = None
    org: str = ""
    team: str | None = None  # charged with the organisation when fair share applies
    claim: Claim | None = None
    lease: Lease | None = None
    priority: int | None = None
    borrowing: bool = False
    rank: int | None = None  # the borrower's Fair Tree rank when it was decided
    head_key: str | None = None  # counted in the head gate's in-flight (``leave`` uncounts)
    grant: Grant | None = None  # a borrower let go by the dispatcher, pending until dispatched
    held: float = 0.0  # seconds the gateway held it before it was dispatched

    @property
    def within_share(self) -> bool | None:
        """How fair share admitted the request: True within its organisation's
        reservation, False borrowing, None outside fair share (no pool)."""
        return None if self.pool is None else not self.borrowing

    def dispatched(self) -> None:
        """The request is now counted in a replica's in-flight: no longer pending."""
        if self.lease is not None:
            self.lease.dispatched()
        if self.grant is not None:
            self.grant.dispatched()


class _PoolUsage(Generic[T]):
    """A pool's decayed usage (per organisation, or per team), re-read at most every
    ``USAGE_TTL``."""

    __slots__ = ("at", "cost", "reading", "value")

    def __init__(self, empty: T) -> None:
        self.value: T = empty
        self.at = -USAGE_TTL
        self.reading: asyncio.Future[T] | None = None
        self.cost = 0.0  # moving mean of a finished request's cost units (held pools only)


class Gate:
    """Limits, fair share and admission for every request, built once by the Gateway.

    ``pools`` maps each canonical model to its pool (None: no pool); fair share
    applies to models whose pool ``fairshare`` knows, admission to models whose
    pool (or, without one, the model's own name) has a controller in
    ``admission``. ``classes`` maps a model to ``interactive``/``batch``.
    ``budgets()`` returns the current book (refreshed by its owner).
    """

    def __init__(
        self,
        *,
        limiter: Limiter,
        budgets: Callable[[], BudgetBook],
        prices: Mapping[str, Prices],
        pools: Mapping[str, str | None],
        classes: Mapping[str, str],
        clock: Clock,
        fairshare: FairShare | None = None,
        fairshare_state: FairShareState | None = None,
        admission: Mapping[str, AdmissionController] | None = None,
        bands: Bands | None = None,
        tags: TagPolicy | None = None,
        on_soft_limit: Alert | None = None,
        send_priority: bool = True,
        on_claim: Callable[[str, str, bool], None] | None = None,
        dispatcher: Dispatcher | None = None,
    ) -> None:
        self._limiter = limiter
        self._budgets = budgets
        self._prices = prices
        self._pools = pools
        self._classes = classes
        self._clock = clock
        self._fairshare = fairshare if fairshare_state is not None else None
        self._state = fairshare_state
        self._fair_pools = frozenset(fairshare.pools) if fairshare is not None else frozenset()
        self._admission = dict(admission or {})
        self._bands = bands
        self._tags = tags or TagPolicy()
        self._on_soft_limit = on_soft_limit
        self._send_priority = send_priority
        self._on_claim = on_claim  # (pool, org, borrowing), for a metric
        self._usage: dict[str, _PoolUsage[dict[str, float]]] = {}
        self._team_usage: dict[str, _PoolUsage[dict[str, dict[str, float]]]] = {}
        self.in_flight: dict[tuple[str, str], list[int]] = {}  # (pool, org) → [within, borrowing]
        self._state_down = False
        self._head = HeadGate()
        self._dispatcher = dispatcher

    async def enter(self, ex: Exchange, tag_header: bytes | None = None) -> Ticket:
        """Admit ``ex`` (identified, body read, model resolved) or raise its refusal."""
        principal = ex.principal
        assert principal is not None
        ticket = Ticket()
        if tag_header is not None:
            added = self._tags.parse(tag_header, principal.org)
            ex.tags = tuple(dict.fromkeys((*principal.tags, *added)))
        model = ex.requested_model
        # Whichever model of the chain serves, its per-model budgets bind the request
        # and its prices bound the reservation; only the one that served is charged.
        chain = ex.chain or (model,)
        now = self._clock.wall()
        book = self._budgets()
        subject = _subject(principal, ex.tags or principal.tags) if len(book) else None
        budgets = book.applicable(subject, model, chain) if subject is not None else ()
        limits, team_limits = _limits(principal)
        if budgets or limits != _NO_LIMITS or team_limits != _NO_LIMITS:
            reservation = ex.reservation
            assert reservation is not None  # reserved when the model was resolved
            subject = subject or _subject(principal, ex.tags or principal.tags)
            cost = max(self._cost(m, reservation.usage()) for m in chain)
            demand = Demand(subject, limits, model, reservation.tokens, cost, budgets, team_limits)
            ticket.limits = await self._admit(demand, principal, now)
            if ticket.limits.lease is not None and limits.max_in_flight is not None:
                self._head.entered(principal.key_id)
                ticket.head_key = principal.key_id
        try:
            if self._on_soft_limit is not None and ticket.limits is not None:
                for budget, spent in zip(
                    ticket.limits.soft_crossed, ticket.limits.soft_spent, strict=True
                ):
                    self._on_soft_limit(budget, now, spent)
            pool = self._pools.get(model)
            controller = self._admission.get(pool or model)
            fair = pool is not None and pool in self._fair_pools
            if not fair and controller is None:
                return ticket  # nothing else to take
            if controller is not None and self._bands is not None:
                # Admission first: a request waiting in the gateway's queue holds no
                # within-share slot (its organisation's running requests keep them).
                # A queue that orders waiters by priority gets this gateway's best
                # guess now; the slot and the priority the engine sees are decided
                # when the request leaves the queue.
                waiting_priority = 0
                if fair and controller.order_by_priority:
                    assert pool is not None
                    waiting_priority = await self._provisional(pool, principal.org, model, now)
                ticket.lease = await controller.admit(
                    band=self._bands.for_team(principal.team).name,
                    tenant=principal.team,
                    priority=waiting_priority,
                )
            if fair:
                assert pool is not None
                ticket.team = principal.team
                await self._claim(ticket, pool, principal.org, model, self._clock.wall())
                if ticket.borrowing and ticket.claim is not None and self._dispatcher is not None:
                    await self._dispatch(ticket, pool, principal.org, model)
                if self._on_claim is not None:
                    self._on_claim(pool, principal.org, ticket.borrowing)
        except BaseException:
            await self.leave(ticket, ex)
            raise
        if self._send_priority:
            ex.priority = ticket.priority
        return ticket

    async def leave(self, ticket: Ticket, ex: Exchange) -> None:
        """Give back what ``ticket`` holds and charge the real usage. Never raises but
        ``CancelledError``; safe to call twice."""
        if ticket.head_key is not None:
            # first: this process's count may never exceed the shared one
            self._head.left(ticket.head_key)
            ticket.head_key = None
        if ticket.limits is None and ticket.pool is None and ticket.lease is None:
            return
        if ticket.lease is not None:
            ticket.lease.release()
        if ticket.grant is not None:
            ticket.grant.release()
        # ``ex.usage`` is what the request is charged and ``ex.cost`` its cost, both set
        # by the settle stage (``proxy.settle``); no usage when nothing reached an
        # engine: the estimate is given back.
        cost, tokens = ex.cost, 0
        if ex.usage is not None:
            tokens = ex.usage.prompt_tokens + ex.usage.completion_tokens
        if ticket.pool is not None:
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
            await self._settle_fairshare(pool, org, claim, cost, ticket.team)
            if dispatcher is not None and claim is not None and claim.within_share:
                dispatcher.seat_freed(pool, org, self._owner_team(ticket))
        if ticket.limits is not None:
            served = ex.model if ex.usage is not None else None
            await self._limiter.settle(
                ticket.limits, tokens=tokens, cost=cost, now=self._now(), model=served
            )

    async def meter(self, ex: Exchange) -> None:
        """Count a request the gateway answers itself (``GET /v1/models``, ``GET /me``)
        against the key's requests per minute and per day, or raise its refusal (429;
        503 when the back end is down and the limiter fails closed).

        It reaches no engine, so it holds no slot and charges no tokens or budget:
        nothing to settle afterwards. Without it a key could send such requests
        without end, each one an accounting record."""
        principal = ex.principal
        assert principal is not None
        p = principal
        limits = Limits(rpm=p.limits.rpm, rpd=p.limits.rpd)
        team_limits = Limits(rpm=p.team_limits.rpm, rpd=p.team_limits.rpd)
        if limits == _NO_LIMITS and team_limits == _NO_LIMITS:
            return
        subject = _subject(principal, principal.tags)
        demand = Demand(subject, limits, "", 1, Money(0), team_limits=team_limits)
        await self._admit(demand, principal, self._now())

    def check_head(self, principal: Principal) -> None:
        """Refuse, before the body is read, a request the limiter would refuse anyway:
        ``principal``'s key is at its in-flight limit in this process, or its requests
        per minute or per day were refused and the Retry-After has not passed
        (``fairgate.limits.head``). Raises ``RateLimited`` (429). Skipped while the
        state back end is down, when the limiter's failure policy decides instead."""
        p = principal.limits
        if p.rpm is None and p.rpd is None and p.max_in_flight is None:
            return  # nothing the head could know: the common case costs three reads
        if self._limiter.available:
            self._head.check(principal.key_id, p.rpm, p.rpd, p.max_in_flight, self._clock.wall())

    async def _admit(self, demand: Demand, principal: Principal, now: float) -> Admission:
        try:
            return await self._limiter.admit(demand, now)
        except RateLimited as error:
            limits = principal.limits
            self._head.refused(principal.key_id, error, limits.rpm, limits.rpd, now)
            raise

    def _now(self) -> float:
        return self._clock.wall()

    async def _claim(self, ticket: Ticket, pool: str, org: str, model: str, now: float) -> None:
        assert self._fairshare is not None and self._state is not None
        policy = self._fairshare
        reservation = policy.reservations(pool).get(org, 0)
        split = _split(policy, pool, org, ticket.team)
        claim: Claim | None = None
        try:
            claim = await self._state.claim(pool, org, reservation, now, split, ticket.team)
        except StateUnavailable as exc:
            # Without the shared count no reservation can be proven: borrow, at the
            # lowest rank (the safe answer), and serve the request.
            self._note_state(exc)
        else:
            self._note_state(None)
        # Held from here on: whatever happens next (a cancelled await included), leave()
        # gives the slot back.
        ticket.pool, ticket.org, ticket.claim = pool, org, claim
        ticket.borrowing = claim is None or not claim.within_share
        counts = self.in_flight.setdefault((pool, org), [0, 0])
        counts[1 if ticket.borrowing else 0] += 1
        cls = _class(self._classes.get(model))
        if claim is None:
            # the lowest borrowing rank: never ahead of a borrower the state could rank
            decision = decide(org, reservation, reservation, MAX_RANK, cls)
        elif claim.within_share:
            decision = policy.within(org, cls, in_org=claim.in_org)
        else:
            by_team: dict[str, dict[str, float]] | None = None
            try:
                usage = self._ranked(pool, await self._pool_usage(pool, now), now)
                if policy.has_team_shares:
                    by_team = await self._pool_team_usage(pool, now)
            except StateUnavailable as exc:
                self._note_state(exc)
                usage = {}
            decision = policy.borrow(pool, org, cls, usage, team=ticket.team, usage_by_team=by_team)
        ticket.priority, ticket.rank = decision.priority, decision.rank

    async def _dispatch(self, ticket: Ticket, pool: str, org: str, model: str) -> None:
        """A borrower in a full pool waits in the dispatcher's queue, holding no claim, and
        is claimed again when it may go: within share if a seat of its organisation came
        free meanwhile, else borrowing at the rank its organisation has then."""
        dispatcher = self._dispatcher
        assert dispatcher is not None
        if not dispatcher.holds(pool):
            return
        ticket.grant = dispatcher.grant_now(pool)
        if ticket.grant is not None:
            return
        # Give back what the claim counted (a borrowing claim holds no slot in the state).
        counts = self.in_flight.get((pool, org))
        if counts is not None:
            counts[1] -= 1
        ticket.pool, ticket.claim, ticket.priority, ticket.rank = None, None, None, None
        ticket.borrowing = False
        if ticket.lease is not None:
            ticket.lease.dispatched()  # admission: held here, it is not pending there
        cls = int(_class(self._classes.get(model)))
        ticket.grant = await dispatcher.wait(pool, org, cls, self._owner_team(ticket))
        ticket.held = ticket.grant.waited
        await self._claim(ticket, pool, org, model, self._clock.wall())

    def _owner_team(self, ticket: Ticket) -> str:
        """The team a held borrower is ranked and queued under: its own where teams have
        sub-shares (they rank too), else none."""
        teams = self._fairshare is not None and self._fairshare.has_team_shares
        return (ticket.team or "") if teams else ""

    def ranks_now(self, pool: str, owners: Collection[Owner]) -> dict[Owner, int]:
        """The Fair Tree rank of each owner, ``(organisation, team)``, in ``pool`` from the
        last usage reading, this gateway's charges since and its requests in flight
        (synchronous; for the dispatcher). Teams rank inside their organisation where it
        has team sub-shares (from the last team usage reading)."""
        policy = self._fairshare
        assert policy is not None
        entry = self._usage.get(pool)
        usage = dict.fromkeys({org for org, _ in owners}, 0.0)
        if entry is not None:
            usage.update(self._ranked(pool, entry.value, self._now()))
        if not policy.has_team_shares:
            ranks = dense_ranks(level_fairshare(policy.shares(pool), usage))
            return {owner: ranks[owner[0]] for owner in owners}
        teams = self._team_usage.get(pool)
        by_team = teams.value if teams is not None else {}
        return {
            (org, team): policy.rank(pool, org, usage, team=team or None, usage_by_team=by_team)
            for org, team in owners
        }

    def _ranked(self, pool: str, usage: dict[str, float], now: float) -> dict[str, float]:
        """The usage a borrower's rank reads: ``usage`` (the last reading, with this
        gateway's charges since) and, where the dispatcher holds the pool, this gateway's
        requests in flight, each counted at the pool's mean cost of a request until it
        finishes and is charged for real.

        Counting what runs, as Slurm charges running jobs, makes a rank follow a
        dispatch at once instead of a request's lifetime later; nothing is charged
        for it, it only ranks."""
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
        assert self._fairshare is not None
        weight = _weight(now - entry.at, self._fairshare.half_life) * entry.cost
        ranked = dict(usage)
        for (p, org), (within, borrowing) in self.in_flight.items():
            if p == pool and within + borrowing > 0:
                ranked[org] = ranked.get(org, 0.0) + (within + borrowing) * weight
        return ranked

    def _charged_here(self, pool: str, org: str, cost: Money) -> None:
        """Add a finished request's cost to the cached usage of ``pool`` until the next
        reading brings it from the state back end (which ``charge`` updates)."""
        entry = self._usage.get(pool)
        if entry is None or cost.micro <= 0 or entry.at < 0 or self._fairshare is None:
            return
        units = cost.micro / 1_000_000
        entry.cost = units if entry.cost <= 0 else entry.cost + (units - entry.cost) / 32
        # The cache holds values decayed to ``entry.at``; a charge now weighs more by
        # the decay since then (ranks compare ratios, so only that weighting matters).
        value = dict(entry.value)
        value[org] = value.get(org, 0.0) + units * _weight(
            self._now() - entry.at, self._fairshare.half_life
        )
        entry.value = value

    async def _provisional(self, pool: str, org: str, model: str, now: float) -> int:
        """The priority a waiter of ``org`` would get if its turn came now, from this
        gateway's own within-share count (no slot is taken)."""
        assert self._fairshare is not None
        cls = _class(self._classes.get(model))
        within = self.in_flight.get((pool, org), (0, 0))[0]
        if within < self._fairshare.reservations(pool).get(org, 0):
            return self._fairshare.decide(pool, org, cls, within, {}).priority
        try:
            usage = await self._pool_usage(pool, now)
        except StateUnavailable:
            usage = {}
        return self._fairshare.decide(pool, org, cls, within, usage).priority

    async def _pool_usage(self, pool: str, now: float) -> dict[str, float]:
        assert self._state is not None and self._fairshare is not None
        state, half_life = self._state, self._fairshare.half_life
        entry = self._usage.get(pool)
        if entry is None:
            entry = self._usage[pool] = _PoolUsage({})
        return await _cached(entry, now, lambda: state.usage(pool, now, half_life))

    async def _pool_team_usage(self, pool: str, now: float) -> dict[str, dict[str, float]]:
        assert self._state is not None and self._fairshare is not None
        state, half_life = self._state, self._fairshare.half_life
        entry = self._team_usage.get(pool)
        if entry is None:
            entry = self._team_usage[pool] = _PoolUsage({})
        return await _cached(entry, now, lambda: state.team_usage(pool, now, half_life))

    async def _settle_fairshare(
        self, pool: str, org: str, claim: Claim | None, cost: Money | None, team: str | None
    ) -> None:
        assert self._state is not None and self._fairshare is not None
        try:
            if claim is not None:
                await self._state.release(claim)
            if cost is not None and cost.micro > 0:
                units, half_life = cost.micro / 1_000_000, self._fairshare.half_life
                await self._state.charge(pool, org, units, self._now(), half_life, team=team)
        except StateUnavailable as exc:
            # The slot expires by itself (lease TTL); the usage charge is lost.
            self._note_state(exc)

    def _note_state(self, exc: StateUnavailable | None) -> None:
        if exc is not None and not self._state_down:
            self._state_down = True
            log.error("fair-share state unavailable, requests borrow meanwhile: %s", exc)
        elif exc is None and self._state_down:
            self._state_down = False
            log.warning("fair-share state available again")

    def _cost(self, model: str, usage: TokenCounts) -> Money:
        prices = self._prices.get(model)
        return prices.cost_of(usage) if prices is not None else Money(0)

    @property
    def state_available(self) -> bool:
        """False while the state back end failed its last call, for limits or fair share."""
        return self._limiter.available and not self._state_down

    async def standing(self, principal: Principal) -> dict[str, Any]:
        """What ``GET /me`` shows: the key, its limits with their use now, and every budget
        it falls under (for all its models) with the spend of the current period.
        ``ServiceUnavailable`` when the state back end is down."""
        subject = _subject(principal, principal.tags)
        limits, team_limits = _limits(principal)
        book = self._budgets()
        budgets = book.for_subject(subject) if len(book) else ()
        usage = await self._limiter.usage(subject, limits, budgets, self._clock.wall(), team_limits)
        fairshare = await self._share_standing(principal)
        used = {
            "rpm": usage.requests_last_minute,
            "tpm": usage.tokens_last_minute,
            "rpd": usage.requests_today,
            "max_in_flight": usage.in_flight,
        }
        return {
            "object": "key",
            "key_id": principal.key_id,
            "org": principal.org,
            "team": principal.team,
            "project": principal.project,
            "tags": list(principal.tags),
            "models": None if principal.models is None else sorted(principal.models),
            "limits": {
                name: None
                if getattr(limits, name) is None
                else {"limit": getattr(limits, name), "used": used[name]}
                for name in ("rpm", "tpm", "rpd", "max_in_flight")
            },
            "team_limits": {
                name: None
                if getattr(team_limits, name) is None
                else {"limit": getattr(team_limits, name), "used": usage.team_used.get(kind, 0)}
                for name, kind in _KINDS.items()
            },
            "budgets": [
                {
                    "scope_kind": b.budget.scope_kind,
                    "scope": b.budget.scope,
                    "model": b.budget.model,
                    "period": b.budget.period,
                    "period_start": _iso(b.period.start),
                    "period_end": _iso(b.period.end),
                    "max": str(b.limit),
                    "soft": None if b.budget.soft is None else str(b.budget.soft),
                    "spent": str(b.spent),
                    "remaining": str(b.remaining),
                    "max_micro": b.limit.micro,
                    "spent_micro": b.spent.micro,
                }
                for b in usage.budgets
            ],
            "fairshare": fairshare,
        }

    async def _share_standing(self, principal: Principal) -> list[dict[str, Any]]:
        """The organisation's fair-share standing in every pool the key's models use:
        one in-flight read per pool (the usage is the ranking's own, reused for a
        second); ``ServiceUnavailable`` when the back end does not answer."""
        if self._fairshare is None or self._state is None:
            return []
        policy, state, org = self._fairshare, self._state, principal.org
        allowed = principal.models
        pools = sorted(
            {
                pool
                for model, pool in self._pools.items()
                if pool in self._fair_pools and (allowed is None or model in allowed)
            }
        )
        now = self._clock.wall()

        async def one(pool: str) -> dict[str, Any]:
            held = await state.in_flight(pool, now)
            usage = await self._pool_usage(pool, now)
            standing = policy.standings(pool, usage).get(org)
            if standing is None:  # no share, no usage: ranked as decide ranks it
                standing = policy.standings(pool, {**usage, org: 0.0})[org]
            here = self.in_flight.get((pool, org), (0, 0))
            return {
                "pool": pool,
                "share": standing.share,
                "reservation": standing.reservation,
                "within_share_in_flight": held.get(org, 0),
                "usage": standing.usage,
                "level": None if math.isinf(standing.level) else standing.level,
                "rank": standing.rank,
                "this_gateway": {
                    "within_share_in_flight": here[0],
                    "borrowing_in_flight": here[1],
                },
            }

        try:
            return list(await asyncio.gather(*(one(pool) for pool in pools)))
        except StateUnavailable as exc:
            self._note_state(exc)
            raise ServiceUnavailable(
                "the fair-share state is unavailable; try again", code="state_unavailable"
            ) from exc

    def fairshare_counts(self) -> Mapping[tuple[str, str], tuple[int, int]]:
        """This process's (within share, borrowing) requests in flight per (pool, org)."""
        return {key: (c[0], c[1]) for key, c in self.in_flight.items()}


_NO_LIMITS = Limits()
_KINDS = {"rpm": "rpm", "tpm": "tpm", "rpd": "rpd", "max_in_flight": "inflight"}


def _limits(p: Principal) -> tuple[Limits, Limits]:
    """The key's limits and its team's totals (built once, when the key was loaded)."""
    return p.limits, p.team_limits


async def _cached(entry: _PoolUsage[T], now: float, read: Callable[[], Awaitable[T]]) -> T:
    """``entry``'s value, re-read with ``read`` when older than ``USAGE_TTL``; one read at
    a time (the others take the last value, or wait for the first one)."""
    if now - entry.at < USAGE_TTL:
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


def _subject(principal: Principal, tags: tuple[str, ...]) -> Subject:
    # budgets name a project as team/project: project names are unique per team only
    project = principal.project
    return Subject(
        principal.key_id,
        principal.org,
        principal.team,
        None if project is None else f"{principal.team}/{project}",
        tags,
    )


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")
