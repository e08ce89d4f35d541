"""One finished request as accounting keeps it: who, what, where, how much, how it ended."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fairgate.core.money import Money

__all__ = ["UsageRecord"]


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class UsageRecord:
    """The accounting record of one request, whatever its outcome.

    ``request_id`` is unique across the store: writing a record twice stores it
    once. ``at`` is when the request ended (an aware datetime, UTC). ``key_id``,
    ``org``, ``team``, ``project`` and ``tags`` are the principal's, copied so the
    record keeps the tree as it was; ``model`` is the canonical name that served
    (after fallback), ``pool`` its pool, ``replica`` the replica that answered
    last (empty when none did). ``status`` is the HTTP status the client got
    (499 for a client that left first), ``outcome`` one word of
    ``fairgate.proxy.exchange.Outcome``.

    Tokens are what the engine reported, or the request's reservation when it
    never did (``estimated``; ``fairgate.proxy.reservation``).
    ``cost_micro`` is micro GPU-hours (``fairgate.accounting.cost.Prices``).
    ``ttft_ms`` is the time to the first byte sent to the client (None when
    nothing was sent), ``total_ms`` the time to the last; ``attempts`` counts
    upstream attempts, retries and fallbacks included. ``client_addr`` is the
    client's address as resolved through trusted proxies
    (``fairgate.core.client_addr``; empty when unknown).

    ``other_costs`` is the part of ``cost_micro`` charged to models other than
    ``model``: one ``(model, pool, cost_micro)`` per other model whose engine took an
    attempt and never answered (a timeout, a broken connection) before ``model``
    served, its reservations at its own prices, as its per-model budgets were
    charged. ``model`` keeps the rest; empty (the common case) when ``model`` was
    charged the whole. Tokens, the request and its ``estimated`` flag stay with
    ``model``.
    """

    request_id: str
    at: datetime
    key_id: str
    org: str
    team: str
    project: str | None = None
    tags: tuple[str, ...] = ()
    model: str = ""
    pool: str | None = None
    replica: str = ""
    route: str = ""
    status: int = 0
    outcome: str = "ok"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_micro: int = 0
    estimated: bool = False
    ttft_ms: int | None = None
    total_ms: int = 0
    attempts: int = 0
    client_addr: str = ""
    other_costs: tuple[tuple[str, str | None, int], ...] = ()

    @property
    def cost(self) -> Money:
        return Money(self.cost_micro)
