"""The limit stage: the key's rate limits and every budget the request falls under.

    limit.check_head(principal)        # before the body: RateLimited 429
    await limit.enter(ex, ticket, claim)   # after the read: RateLimited 429, 503
    ...                                    # admit, route, relay
    await limit.retry(ex, ticket, model)   # before a retry after an unanswered attempt
    await limit.leave(ticket, ex)          # by the settle stage, whatever happened

``enter`` is one atomic check-and-charge of the key's rate limits (and its
team's totals) and of every budget the request falls under, at the estimated
tokens and cost (``fairgate.limits``); a refusal names the limit or the budget.
A reservation crossing a budget's soft limit is reported once. ``leave`` gives
the in-flight slot back and corrects tokens and cost with the real usage.

Both are one call to the state back end, and each carries the admit stage's
business with that back end when there is some: ``enter`` the fair-share claim
``Admit.claim_ahead`` asked for (made only if every limit was charged; its
outcome is ``ticket.limits.claim``, taken over by ``Admit.enter``), ``leave`` the
slot release and usage charge ``Admit.leave`` left on the ticket
(``Ticket.due``). So the plain way in is one round trip, and so is the way out.

``check_head`` refuses, before the body is read, what this process already knows
the limiter would refuse (``fairgate.limits.head``); ``meter`` counts a request
the gateway answers itself against the key's requests per minute and per day.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fairgate.accounting import Prices
from fairgate.core.clock import Clock
from fairgate.core.errors import RateLimited, ServiceUnavailable
from fairgate.core.memo import BoundedMemo
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.limits import Budget, BudgetBook, Demand, Limiter, Limits, Subject
from fairgate.limits.demand import Admission
from fairgate.limits.fairshare_state import ClaimRequest
from fairgate.limits.head import HeadGate
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.ticket import Ticket

__all__ = ["Alert", "Limit", "key_limits", "subject_of"]

Alert = Callable[[Budget, float, Money], None]
"""Called once per budget whose soft limit a reservation crossed: (budget, now, spent)."""

_NO_LIMITS = Limits()

_TERMS_SIZE = 4096
"""How many (principal, model, chain, tags) the stage remembers the terms of."""


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity: a memo
class _Terms:
    """What requests of one principal for one model (with its chain and tags) are
    charged under: who, which limits and budgets, and the chain's prices (models without
    any left out). ``free`` when nothing limits them. Valid while the budget book is
    the same (a key whose record changes gets a new principal object from the key
    cache). The stage's memo keys it by the principal's identity: the entry keeps the
    principal alive, so no other principal can take its id while the entry lives."""

    principal: Principal
    subject: Subject
    model: str
    limits: Limits
    team_limits: Limits
    budgets: tuple[Budget, ...]
    prices: tuple[Prices, ...]
    free: bool


class Limit:
    """Rate limits and budgets for every request, built once by the Gateway.

    ``budgets()`` returns the current book (refreshed by its owner); ``prices``
    maps each canonical model to its prices (a model without any costs nothing).
    """

    def __init__(
        self,
        *,
        limiter: Limiter,
        budgets: Callable[[], BudgetBook],
        prices: Mapping[str, Prices],
        clock: Clock,
        on_soft_limit: Alert | None = None,
    ) -> None:
        self._limiter = limiter
        self._budgets = budgets
        self._prices = prices
        self._clock = clock
        self._on_soft_limit = on_soft_limit
        self._head = HeadGate()
        self._terms = BoundedMemo[tuple[object, ...], _Terms](_TERMS_SIZE)
        self._book: BudgetBook | None = None

    @property
    def available(self) -> bool:
        """False while the state back end failed the limiter's last call."""
        return self._limiter.available

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

    async def enter(self, ex: Exchange, ticket: Ticket, claim: ClaimRequest | None = None) -> None:
        """Charge ``ex`` (identified, body read, model resolved) against its limits and
        budgets onto ``ticket``, or raise its refusal. With ``claim``, the fair-share
        claim is made in the same call once every limit was charged, and
        ``ticket.ahead`` says so (a refused request claims nothing)."""
        principal = ex.principal
        assert principal is not None
        now = self._clock.wall()
        terms = self._terms_of(principal, ex)
        if claim is None and terms.free:
            return
        reservation = ex.reservation
        assert reservation is not None  # reserved when the model was resolved
        # Whichever model of the chain serves, its per-model budgets bind the request
        # and its prices bound the reservation; only the one that served is charged.
        cost = 0
        for prices in terms.prices:
            micro = prices.cost_of(reservation).micro
            if micro > cost:
                cost = micro
        demand = Demand(
            terms.subject,
            terms.limits,
            terms.model,
            reservation.tokens,
            Money(cost),
            terms.budgets,
            terms.team_limits,
            memo=terms,
        )
        admitted = ticket.limits = await self._admit(demand, principal, now, claim)
        ticket.ahead = claim is not None
        if admitted.lease is not None and terms.limits.max_in_flight is not None:
            self._head.entered(principal.key_id)
            ticket.head_key = principal.key_id
        if admitted.soft_crossed:
            self._alert(admitted, now)

    def _alert(self, admitted: Admission, now: float) -> None:
        """Report each budget whose soft limit ``admitted``'s charge crossed."""
        if self._on_soft_limit is not None:
            for budget, spent in zip(admitted.soft_crossed, admitted.soft_spent, strict=True):
                self._on_soft_limit(budget, now, spent)

    def _terms_of(self, principal: Principal, ex: Exchange) -> _Terms:
        """What ``ex`` is charged under, worked out once per principal, model, chain and
        tags and kept while the budget book is the same (the caps in force, which move
        with temporary increases, are the limiter's to work out)."""
        book = self._budgets()
        if book is not self._book:  # a new book: every entry was worked out under the old
            self._terms.clear()
            self._book = book
        model = ex.requested_model
        chain = ex.chain or (model,)
        tags = ex.tags or principal.tags
        memo = (id(principal), model, chain, tags)
        terms = self._terms.get(memo)
        if terms is None or terms.principal is not principal:
            terms = self._terms.keep(memo, self._work_out(principal, model, chain, tags, book))
        return terms

    def _work_out(
        self,
        principal: Principal,
        model: str,
        chain: tuple[str, ...],
        tags: tuple[str, ...],
        book: BudgetBook,
    ) -> _Terms:
        subject = subject_of(principal, tags)
        budgets = book.applicable(subject, model, chain) if len(book) else ()
        limits, team_limits = key_limits(principal)
        prices = tuple(p for m in chain if (p := self._prices.get(m)) is not None)
        free = not budgets and limits == _NO_LIMITS and team_limits == _NO_LIMITS
        return _Terms(principal, subject, model, limits, team_limits, budgets, prices, free)

    async def retry(self, ex: Exchange, ticket: Ticket, tried: str) -> bool:
        """Charge ``ex``'s budgets one more reservation, at the prices of the model
        ``tried``, before a retry that follows an attempt an engine may have worked on;
        False when a budget refuses it (or the state is down and the limiter fails
        closed): the retry is then not made.

        That attempt is charged on top of whichever one serves (``proxy.reservation``),
        so without this charge each admitted request could spend ``1 + retries``
        reservations while its budgets' counters held one: concurrent requests whose
        attempts time out would end a budget far above its cap. Charged like an
        admission, a retry is made only while the budgets are below their caps, and the
        bound stays one reservation. ``leave`` gives these charges back (the request's
        own settle charges every attempt's cost)."""
        principal = ex.principal
        reservation = ex.reservation
        if principal is None or reservation is None:
            return True
        terms = self._terms_of(principal, ex)
        prices = self._prices.get(tried)
        # the budgets that attempt is charged to: all-model ones and the tried model's own
        budgets = tuple(b for b in terms.budgets if b.model is None or b.model == tried)
        if not budgets or prices is None:
            return True  # no budget binds it, or the attempt costs nothing
        cost = prices.cost_of(reservation)
        if cost.micro <= 0:
            return True
        demand = Demand(terms.subject, _NO_LIMITS, terms.model, 1, cost, budgets)
        now = self._clock.wall()
        try:
            admitted = await self._limiter.admit(demand, now)
        except (RateLimited, ServiceUnavailable):
            return False
        if admitted.lease is not None:
            if ticket.retries is None:
                ticket.retries = []
            ticket.retries.append(admitted)
        if admitted.soft_crossed:
            self._alert(admitted, now)
        return True

    async def leave(self, ticket: Ticket, ex: Exchange) -> None:
        """Give back the in-flight slot ``ticket`` holds and charge the real usage:
        ``ex.usage`` and ``ex.cost``, set by the settle stage (``proxy.settle``); no usage
        when nothing reached an engine: the estimate is given back. What the admit stage
        left on the ticket for the state (``Ticket.due``: a slot to release, usage to
        charge) goes in the same call, and the ticket says it was paid and whether that
        call reached the state (``Due.answered``). Never raises but ``CancelledError``;
        safe to call twice."""
        if ticket.head_key is not None:
            # first: this process's count may never exceed the shared one
            self._head.left(ticket.head_key)
            ticket.head_key = None
        admitted, ticket.limits = ticket.limits, None
        due = ticket.due
        release = charge = None
        if due is not None and (due.claim is not None or due.charge is not None):
            # marked paid before the await: a settle cancelled mid-way still completes
            ticket.due, release, charge = due.paid(), due.claim, due.charge
        if admitted is None:
            if release is None and charge is None:
                if ticket.retries is not None:
                    await self._give_back_retries(ticket)
                return
            admitted = Admission(lease=None)
        usage = ex.usage
        tokens = 0 if usage is None else usage.prompt_tokens + usage.completion_tokens
        served = ex.model if usage is not None else None
        answered = await self._limiter.settle(
            admitted,
            tokens=tokens,
            cost=ex.cost,
            now=self._clock.wall(),
            model=served,
            costs=ex.costs,
            release=release,
            charge=charge,
        )
        if due is not None and ((release is not None and release.lease is not None) or charge):
            # the call carried the admit stage's business: it notes whether it got through
            ticket.due = due.paid(answered)
        if ticket.retries is not None:
            await self._give_back_retries(ticket)

    async def _give_back_retries(self, ticket: Ticket) -> None:
        """Give back what ``retry`` charged, after the request's own settle charged every
        attempt: until then the counters hold at least what the request owes, and a
        settle cancelled between the two leaves the counters above what was spent (the
        records are right), never below."""
        retries, ticket.retries = ticket.retries, None
        if retries is None:
            return
        for extra in retries:
            await self._limiter.settle(extra, tokens=None, cost=Money(0), now=self._clock.wall())

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
        subject = subject_of(principal, principal.tags)
        demand = Demand(subject, limits, "", 1, Money(0), team_limits=team_limits)
        await self._admit(demand, principal, self._clock.wall())

    @property
    def limiter(self) -> Limiter:
        return self._limiter

    def budgets(self) -> BudgetBook:
        """The current budget book."""
        return self._budgets()

    def now(self) -> float:
        return self._clock.wall()

    async def _admit(
        self, demand: Demand, principal: Principal, now: float, claim: ClaimRequest | None = None
    ) -> Admission:
        try:
            return await self._limiter.admit(demand, now, claim)
        except RateLimited as error:
            limits = principal.limits
            self._head.refused(principal.key_id, error, limits.rpm, limits.rpd, now)
            raise


def key_limits(p: Principal) -> tuple[Limits, Limits]:
    """The key's limits and its team's totals (built once, when the key was loaded)."""
    return p.limits, p.team_limits


def subject_of(principal: Principal, tags: tuple[str, ...]) -> Subject:
    """Who a request is charged to, for its limits and budgets."""
    # budgets name a project as team/project: project names are unique per team only
    project = principal.project
    return Subject(
        principal.key_id,
        principal.org,
        principal.team,
        None if project is None else f"{principal.team}/{project}",
        tags,
    )
