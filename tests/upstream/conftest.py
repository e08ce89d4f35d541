"""A real HTTP engine stand-in on 127.0.0.1: configurable answers, records every request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvloop
from aiohttp import web

VLLM_METRICS_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
"""


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Modules that set ``BOTH_LOOPS = True`` run each test on asyncio's loop and on uvloop
    (the gateway's); the others on asyncio's alone."""
    if getattr(getattr(item, "module", None), "BOTH_LOOPS", False):
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeEngine:
    """Answers /health, /metrics and /v1/models as told; anything else with ``reply``."""

    url: str = ""
    port: int = 0
    health_status: int = 200
    metrics_status: int = 200
    metrics_page: str = VLLM_METRICS_PAGE
    stall: bool = False  # hold every answer until the test ends
    reply: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path, dict(request.headers), body))
        if self.stall:
            await self.release.wait()
        if request.path == "/health":
            return web.Response(status=self.health_status)
        if request.path == "/metrics":
            return web.Response(status=self.metrics_status, text=self.metrics_page)
        if request.path == "/v1/models":
            return web.json_response({"object": "list", "data": []}, status=self.health_status)
        if self.reply is not None:
            return await self.reply(request)
        return web.Response(text="ok")


StartEngine = Callable[[], Awaitable[FakeEngine]]


@pytest.fixture
async def start_engine() -> AsyncIterator[StartEngine]:
    runners: list[tuple[web.AppRunner, FakeEngine]] = []

    async def start() -> FakeEngine:
        engine = FakeEngine()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", engine.handle)
        runner = web.AppRunner(app, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        engine.port = runner.addresses[0][1]
        engine.url = f"http://127.0.0.1:{engine.port}"
        runners.append((runner, engine))
        return engine

    yield start
    for runner, engine in runners:
        engine.release.set()
        await runner.cleanup()


@pytest.fixture
async def engine(start_engine: StartEngine) -> FakeEngine:
    return await start_engine()


@pytest.fixture
def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
