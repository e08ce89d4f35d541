"""The read-only routes: ``/health``, ``/v1/models``, ``/metrics``, ``/slots``, ``/props``."""

from __future__ import annotations

import asyncio
import time

import orjson

from fairgate.sim.asgi import Receive, Scope, Send, respond
from fairgate.sim.llama import props_body, slots_body
from fairgate.sim.metrics import render_llama, render_vllm
from fairgate.sim.simulator import Simulator

__all__ = ["Catalog"]

_PROMETHEUS = b"text/plain; version=0.0.4; charset=utf-8"


class Catalog:
    """Handlers for the routes that only describe the engine; the model list is built once."""

    def __init__(self, sim: Simulator) -> None:
        self._sim = sim
        config = sim.config
        self._llama = config.personality == "llama-server"
        created = int(time.time())
        owner = "llamacpp" if self._llama else "vllm"
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": owner,
                "root": name,
                "parent": None,
                "max_model_len": config.context_length,
            }
            for name in config.models
        ]
        self._models = orjson.dumps({"object": "list", "data": data})

    async def health(self, scope: Scope, receive: Receive, send: Send) -> None:
        # vLLM answers an empty 200; llama-server a small JSON status.
        body = b'{"status":"ok"}' if self._llama else b""
        await respond(send, 200, body)

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, self._models)

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        delay = self._sim.faults.metrics_delay
        if delay > 0:
            await asyncio.sleep(delay)
        sim = self._sim
        if self._llama:
            body = render_llama(sim.gauges(), sim.stats)
        else:
            body = render_vllm(sim.config.models[0], sim.gauges(), sim.stats)
        await respond(send, 200, body, _PROMETHEUS)

    async def slots(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, slots_body(self._sim.config, self._sim.gauges().running))

    async def props(self, scope: Scope, receive: Receive, send: Send) -> None:
        await respond(send, 200, props_body(self._sim.config))
