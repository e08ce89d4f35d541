"""The limit and admit stages composed as the pipeline composes them, for their tests.

``Stages`` takes the arguments of both stages; ``enter`` runs the read stage's tag
parsing, then limit, then admit (with ``ride``, the fair-share claim rides with the
limits as the Gateway wires it: ``Admit.claim_ahead`` into ``Limit.enter``); ``leave``
gives back in the settle stage's order (admit, limit, then what admit still owes),
``ex.cost`` computed first by the settle stage's own ``Settler.cost_of``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from fairgate.accounting import Prices
from fairgate.admission import AdmissionController, Bands
from fairgate.core.clock import Clock, SystemClock
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.fairshare import FairShare
from fairgate.limits import Budget, BudgetBook, Limiter, prompt_tokens
from fairgate.limits.fairshare_state import FairShareState
from fairgate.observability.metrics import GatewayMetrics
from fairgate.proxy.admit import Admit
from fairgate.proxy.dispatch import Dispatcher
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.limit import Alert, Limit
from fairgate.proxy.me import standing
from fairgate.proxy.reservation import Reservation
from fairgate.proxy.settle import Settler
from fairgate.proxy.tags import TagPolicy
from fairgate.proxy.ticket import Ticket
from fairgate.proxy.usage import Usage

PRICES = {"m": Prices(Money.from_units(1).micro, Money.from_units(2).micro, 0)}


def exchange(principal: Principal, *, body: int = 400, max_tokens: int | None = 100) -> Exchange:
    ex = Exchange(request_id="r", method="POST", path="/v1/chat/completions", started=0.0)
    ex.principal = principal
    ex.requested_model = ex.model = "m"
    ex.prompt_bytes = body
    ex.parsed = {} if max_tokens is None else {"max_tokens": max_tokens}
    ex.reservation = Reservation(prompt_tokens(body), 256 if max_tokens is None else max_tokens)
    return ex


def served(ex: Exchange, prompt: int, completion: int) -> Exchange:
    ex.replica = "r0"
    ex.usage = Usage(prompt, completion)
    return ex


class Stages:
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
        dispatcher: Dispatcher | None = None,
        ride: bool = False,
    ) -> None:
        self.tags = tags or TagPolicy()
        self.limit = Limit(
            limiter=limiter,
            budgets=budgets,
            prices=prices,
            clock=clock,
            on_soft_limit=on_soft_limit,
        )
        # the cost is the settle stage's, at the same prices the limit stage charges
        self.settler = Settler(GatewayMetrics(), prices=prices)
        self.admit = Admit(
            pools=pools,
            classes=classes,
            clock=clock,
            fairshare=fairshare,
            fairshare_state=fairshare_state,
            admission=admission,
            bands=bands,
            dispatcher=dispatcher,
            claims_ride=ride,
        )

    async def enter(self, ex: Exchange, tag_header: bytes | None = None) -> Ticket:
        ticket = Ticket()
        try:
            await self.enter_limit(ex, ticket, tag_header)
            await self.admit.enter(ex, ticket)
        except BaseException:
            await self.leave(ticket, ex)
            raise
        return ticket

    async def enter_limit(
        self, ex: Exchange, ticket: Ticket, tag_header: bytes | None = None
    ) -> None:
        """The read stage's tags, then the limit stage, the claim riding when it can."""
        assert ex.principal is not None
        added = self.tags.apply(ex.principal, tag_header)
        if added is not None:
            ex.tags = added
        await self.limit.enter(ex, ticket, self.admit.claim_ahead(ex))

    async def leave(self, ticket: Ticket, ex: Exchange) -> None:
        """As the settle stage leaves: ``ex.cost`` is the served usage's cost, then the
        admit stage gives back, then the limit stage."""
        self.settler.price(ex, ex.usage)
        for leave in self.leaves:
            await leave(ticket, ex)

    @property
    def leaves(self) -> tuple[Callable[[Ticket, Exchange], Awaitable[None]], ...]:
        """The stages' leave steps in the settle stage's order (``Settler``'s ``leave``)."""
        return (self.admit.leave, self.limit.leave, self.admit.finish)

    def check_head(self, principal: Principal) -> None:
        self.limit.check_head(principal)

    async def standing(self, principal: Principal) -> dict[str, Any]:
        return await standing(principal, self.limit, self.admit)

    def fairshare_counts(self) -> Mapping[tuple[str, str], tuple[int, int]]:
        return self.admit.fairshare_counts()

    def ranks_now(self, pool: str, owners: Collection[tuple[str, str]]) -> dict[Any, int]:
        return self.admit.ranks_now(pool, owners)


def stages(
    store: Any,
    *,
    budgets: tuple[Budget, ...] = (),
    pools: bool = False,
    tags: TagPolicy | None = None,
    prices: dict[str, Prices] | None = None,
) -> Stages:
    """Both stages over ``store``; ``pools``: model m in pool p (C = 4, a and b half each)."""
    fairshare = FairShare({"p": 4}, {"p": {"a": 0.5, "b": 0.5}}) if pools else None
    book = BudgetBook(budgets)
    return Stages(
        limiter=Limiter(store),
        budgets=lambda: book,
        prices=PRICES if prices is None else prices,
        pools={"m": "p" if pools else None},
        classes={"m": "interactive"},
        clock=SystemClock(),
        fairshare=fairshare,
        fairshare_state=store if pools else None,
        tags=tags,
    )
