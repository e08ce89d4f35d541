"""``GET /me`` on the client listener: what the calling key may do and has used.

Authenticated by the key itself like every client route; it shows the key's
organisation, team, project and tags, its rate limits with their use now,
and every budget it falls under with the spend of the current period. Amounts
are GPU-hours as decimal strings, and integer micro-units.
"""

from __future__ import annotations

import orjson

from fairgate.core.asgi import Scope, Send
from fairgate.proxy.endpoints import LocalHandler, send_json
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.gate import Gate

__all__ = ["me_handler"]


def me_handler(gate: Gate) -> LocalHandler:
    async def me(scope: Scope, ex: Exchange, send: Send) -> None:
        assert ex.principal is not None
        body = orjson.dumps(await gate.standing(ex.principal))
        await send_json(send, 200, body, ex)

    return me
