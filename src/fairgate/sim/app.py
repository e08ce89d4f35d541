"""The simulator as a raw ASGI application: a route table, auth, the record, faults.

Inference requests go through one pipeline: read the body, record it, check the
key, parse the JSON, take the fault plan, stall if told to, parse the route's
body, then generate. Everything the gateway can observe follows vLLM (or
llama-server with that personality): which routes need the key, error shapes,
``{"detail": "Not Found"}`` for unknown paths.
"""

from __future__ import annotations

import hmac
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from fairgate.core.errors import GatewayError
from fairgate.sim.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    Watch,
    header,
    read_body,
    respond,
    vllm_error,
)
from fairgate.sim.catalog import Catalog
from fairgate.sim.completions import ChatFormat, CompletionFormat
from fairgate.sim.config import SimConfig
from fairgate.sim.control import Control
from fairgate.sim.embeddings import embeddings_body
from fairgate.sim.faults import FaultPlan
from fairgate.sim.generation import serve_generation
from fairgate.sim.inputs import Generation
from fairgate.sim.llama import LlamaFormat
from fairgate.sim.output import OutputFormat
from fairgate.sim.record import RecordedRequest
from fairgate.sim.responses_api import ResponsesFormat
from fairgate.sim.simulator import Simulator

__all__ = ["SimApp"]

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]
_UNRECORDED = ("/sim/", "/metrics", "/health")
_LLAMA_PUBLIC = frozenset({"/health", "/v1/health", "/models", "/v1/models"})


class SimApp:
    """``SimApp(config)`` is an ASGI 3 application; its lifespan starts and stops the engine."""

    def __init__(self, config: SimConfig) -> None:
        self.sim = Simulator(config)
        self._llama = config.personality == "llama-server"
        self._key = f"Bearer {config.api_key}".encode() if config.api_key else None
        self._ids = itertools.count(1)
        self._routes = self._route_table()

    def shutting_down(self) -> None:
        """The server stops accepting: abort what the engine holds, refuse new work (503)."""
        if self.sim.engine is not None:
            self.sim.engine.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    def _route_table(self) -> dict[str, dict[str, Handler | str]]:
        # A handler, or the kind of inference request the pipeline serves there.
        catalog, control = Catalog(self.sim), Control(self.sim)
        routes: dict[str, dict[str, Handler | str]] = {
            "/health": {"GET": catalog.health},
            "/metrics": {"GET": catalog.metrics},
            "/v1/models": {"GET": catalog.models},
            "/v1/chat/completions": {"POST": "chat"},
            "/v1/completions": {"POST": "completion"},
            "/v1/responses": {"POST": "responses"},
            "/v1/embeddings": {"POST": "embeddings"},
            "/sim/requests": {"GET": control.requests},
            "/sim/stats": {"GET": control.stats},
            "/sim/batch": {"GET": control.batch},
            "/sim/faults": {"GET": control.get_faults, "POST": control.set_faults},
            "/sim/reset": {"POST": control.reset},
        }
        if self._llama:
            routes |= {
                "/slots": {"GET": catalog.slots},
                "/props": {"GET": catalog.props},
                "/completion": {"POST": "llama"},
                "/infill": {"POST": "infill"},
            }
        return routes

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        entry = None
        if self.sim.recorder.size and not path.startswith(_UNRECORDED):
            entry = RecordedRequest(
                scope["method"],
                path,
                scope.get("query_string", b""),
                [(bytes(k), bytes(v)) for k, v in scope["headers"]],
                b"",
                time.time(),
            )
            self.sim.recorder.add(entry)
        methods = self._routes.get(path)
        if methods is None:
            await self._not_found(send)
            return
        handler = methods.get(scope["method"])
        if handler is None:
            await respond(send, 405, b'{"detail":"Method Not Allowed"}')
        elif isinstance(handler, str):
            await self._inference(scope, receive, send, handler, entry)
        elif self._authorized(scope):
            await handler(scope, receive, send)
        else:
            await self._unauthorized(send)

    def _authorized(self, scope: Scope) -> bool:
        if self._key is None:
            return True
        path: str = scope["path"]
        if path.startswith("/sim/"):
            return True
        # vLLM guards /v1 only; llama-server everything but a few public routes.
        if self._llama and path in _LLAMA_PUBLIC:
            return True
        if not self._llama and not path.startswith("/v1"):
            return True
        return hmac.compare_digest(header(scope, b"authorization") or b"", self._key)

    async def _inference(
        self, scope: Scope, receive: Receive, send: Send, kind: str, entry: RecordedRequest | None
    ) -> None:
        try:
            body = await read_body(receive)
        except ClientGone:
            return
        if entry is not None:
            entry.body = body
        if not self._authorized(scope):
            await self._unauthorized(send)
            return
        self.sim.stats.received += 1
        try:
            parsed = self.sim.inputs.json(body)
            plan = self.sim.faults.take(streaming=parsed.get("stream") is True)
            if plan.fail_status is not None:
                message = f"injected fault: this request fails with status {plan.fail_status}"
                await respond(send, plan.fail_status, self._error(plan.fail_status, message))
                return
            watch = Watch(receive)
            try:
                await watch.sleep(plan.stall_before_headers)
                if not watch.gone.is_set():
                    await self._serve(kind, scope, send, watch, parsed, plan, entry)
            finally:
                watch.close()
        except GatewayError as exc:
            await respond(send, exc.status, self._error(exc.status, exc.message))

    async def _serve(
        self,
        kind: str,
        scope: Scope,
        send: Send,
        watch: Watch,
        body: dict[str, Any],
        plan: FaultPlan,
        entry: RecordedRequest | None,
    ) -> None:
        sim = self.sim
        if kind == "embeddings":
            model = sim.inputs.model(body)
            inputs = sim.inputs.embedding_inputs(body)
            dim = sim.config.embedding_dim
            payload = embeddings_body(body, model, inputs, dim, sim.config.seed)
            tokens = sum(len(i) for i in inputs)
            sim.stats.prompt_tokens += tokens
            await respond(send, 200, payload)
            return
        gen, fmt = self._parse(kind, scope, body)
        if entry is not None:
            entry.priority = gen.priority
        request_id = header(scope, b"x-request-id")
        rid = request_id.decode("latin-1") if request_id else f"req-{next(self._ids)}"
        await serve_generation(sim, send, watch, gen, fmt, plan, rid)

    def _parse(
        self, kind: str, scope: Scope, body: dict[str, Any]
    ) -> tuple[Generation, OutputFormat]:
        inputs = self.sim.inputs
        priority = None if self._llama else header(scope, b"x-vllm-priority")
        fmt: OutputFormat
        if kind == "chat":
            gen = inputs.chat(body, priority)
            fmt = ChatFormat(gen.model)
        elif kind == "completion":
            gen = inputs.completion(body, priority)
            fmt = CompletionFormat(gen.model)
        elif kind == "responses":
            gen = inputs.responses(body, priority)
            fmt = ResponsesFormat(gen.model, gen.max_tokens if gen.explicit_max else None)
        else:
            gen = inputs.llama_completion(body, infill=kind == "infill")
            fmt = LlamaFormat(gen.model, gen.max_tokens)
        return gen, fmt

    def _error(self, status: int, message: str) -> bytes:
        if not self._llama:
            return vllm_error(status, message)
        kind = "invalid_request_error" if status < 500 else "server_error"
        return _json({"error": {"code": status, "message": message, "type": kind}})

    async def _not_found(self, send: Send) -> None:
        if self._llama:
            await respond(send, 404, self._error(404, "File Not Found"))
        else:
            await respond(send, 404, b'{"detail":"Not Found"}')

    async def _unauthorized(self, send: Send) -> None:
        if self._llama:
            body = _json(
                {
                    "error": {
                        "code": 401,
                        "message": "Invalid API Key",
                        "type": "authentication_error",
                    }
                }
            )
        else:
            body = b'{"error":"Unauthorized"}'
        await respond(send, 401, body)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        engine = self.sim.engine
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if engine is not None:
                    engine.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if engine is not None:
                    await engine.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _json(value: object) -> bytes:
    return orjson.dumps(value)
