"""``GET /me`` on the client listener: what the calling key may do and has used.

Authenticated by the key itself like every client route; it shows the key's
organisation, team, project and tags, its rate limits with their use now,
every budget it falls under with the spend of the current period, and its
organisation's fair-share standing in each pool its models use. Amounts are
GPU-hours as decimal strings, and integer micro-units.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime
from typing import Any

import orjson

from fairgate.core.asgi import Scope, Send
from fairgate.core.errors import ServiceUnavailable
from fairgate.core.principal import Principal
from fairgate.limits import StateUnavailable
from fairgate.proxy.admit import Admit
from fairgate.proxy.endpoints import LocalHandler, send_json
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.limit import Limit, key_limits, subject_of

__all__ = ["me_handler", "standing"]

_KINDS = {"rpm": "rpm", "tpm": "tpm", "rpd": "rpd", "max_in_flight": "inflight"}


def me_handler(limit: Limit, admit: Admit) -> LocalHandler:
    async def me(scope: Scope, ex: Exchange, send: Send) -> None:
        assert ex.principal is not None
        body = orjson.dumps(await standing(ex.principal, limit, admit))
        await send_json(send, 200, body, ex)

    return me


async def standing(principal: Principal, limit: Limit, admit: Admit | None) -> dict[str, Any]:
    """What ``GET /me`` shows: the key, its limits with their use now, and every budget
    it falls under (for all its models) with the spend of the current period.
    ``ServiceUnavailable`` when the state back end is down."""
    subject = subject_of(principal, principal.tags)
    limits, team_limits = key_limits(principal)
    book = limit.budgets()
    budgets = book.for_subject(subject) if len(book) else ()
    usage = await limit.limiter.usage(subject, limits, budgets, limit.now(), team_limits)
    fairshare = await _share_standing(principal, admit, limit.now())
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


async def _share_standing(
    principal: Principal, admit: Admit | None, now: float
) -> list[dict[str, Any]]:
    """The organisation's fair-share standing in every pool the key's models use:
    one in-flight read per pool (the usage is the ranking's own, reused for a
    second); ``ServiceUnavailable`` when the back end does not answer."""
    if admit is None or admit.policy is None or admit.state is None:
        return []
    policy, state, org = admit.policy, admit.state, principal.org
    allowed = principal.models
    pools = sorted(
        {
            pool
            for model, pool in admit.pools.items()
            if pool in admit.fair_pools and (allowed is None or model in allowed)
        }
    )

    async def one(pool: str) -> dict[str, Any]:
        held = await state.in_flight(pool, now)
        usage = await admit.pool_usage(pool, now)
        standing = policy.standings(pool, usage).get(org)
        if standing is None:  # no share, no usage: ranked as decide ranks it
            standing = policy.standings(pool, {**usage, org: 0.0})[org]
        here = admit.in_flight.get((pool, org), (0, 0))
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
        admit.note_state(exc)
        raise ServiceUnavailable(
            "the fair-share state is unavailable; try again", code="state_unavailable"
        ) from exc


def _iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")
