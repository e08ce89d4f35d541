"""The control surface under ``/sim/``: what was received, counters, the batch, faults, reset.

Test and debugging endpoints, unauthenticated by design: a simulator is meant
to listen on loopback next to the gateway under test, never to be exposed.
"""

from __future__ import annotations

from urllib.parse import parse_qs

import orjson

from fairgate.core.errors import BadRequest
from fairgate.sim.asgi import ClientGone, Receive, Scope, Send, read_body, respond, vllm_error
from fairgate.sim.simulator import Simulator

__all__ = ["Control"]


class Control:
    """``GET /sim/requests``, ``GET /sim/stats``, ``GET /sim/batch``, ``GET|POST /sim/faults``,
    ``POST /sim/reset``."""

    def __init__(self, sim: Simulator) -> None:
        self._sim = sim

    async def requests(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        path = query.get("path", [None])[-1]
        limit_text = query.get("limit", [None])[-1]
        if limit_text is not None and not limit_text.isdigit():
            await respond(send, 400, vllm_error(400, "limit must be a non-negative integer"))
            return
        limit = int(limit_text) if limit_text is not None else None
        await respond(send, 200, orjson.dumps(self._sim.recorder.entries(path, limit)))

    async def stats(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, orjson.dumps(self._sim.stats_json()))

    async def batch(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, orjson.dumps(self._sim.batch_json()))

    async def get_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, orjson.dumps(self._sim.faults.to_json()))

    async def set_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_body(receive)
        except ClientGone:
            return
        try:
            spec = orjson.loads(body or b"{}")
            if not isinstance(spec, dict):
                raise BadRequest("the faults body must be a JSON object")
            self._sim.faults.arm(spec)
        except orjson.JSONDecodeError:
            await respond(send, 400, vllm_error(400, "the faults body must be JSON"))
            return
        except BadRequest as exc:
            await respond(send, 400, vllm_error(400, exc.message))
            return
        await respond(send, 200, orjson.dumps(self._sim.faults.to_json()))

    async def reset(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._sim.reset()
        await respond(send, 200, b'{"reset":true}')
