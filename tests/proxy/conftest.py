"""Fixtures of the proxy tests: a counter store of each kind, and the in-process Gateway.

async def test_x(sim, start_gateway):
    gw = await start_gateway([model("m", sim)])
    answer = await gw.client.post("/v1/chat/completions", json=..., headers=AUTH)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.e2e.conftest import TEST_KEY, write_config
from tests.redis_keys import delete_prefix

from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.sim.process import SimProcess
from fairgate.state import MemoryCounterStore, RedisCounterStore
from fairgate.tenancy.actor import Actor


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryCounterStore()
        return
    url = request.getfixturevalue("redis_url")
    # a prefix of the test's own: other runs (and xdist workers) share the server
    prefix = f"fg-test:proxy:{uuid.uuid4().hex}:"
    # 5 s, not the 0.5 s default: on a loaded machine this process can be slow to read an
    # answer, and these tests are not about the back end's deadline (tests/state are)
    redis = RedisCounterStore(url, prefix=prefix, timeout=5.0)
    yield redis
    await redis.aclose()
    await delete_prefix(url, prefix)


@dataclass
class Answer:
    """What a client got from one in-process request."""

    status: int
    headers: dict[bytes, bytes]
    body: bytes
    reads: int  # how many times the gateway asked for the request's body

    def json(self) -> Any:
        return orjson.loads(self.body)


class InProcess:
    """The real Gateway of a configuration, started in this test's event loop, its
    client listener's ASGI application called in-process (no socket, no server).

    ``client`` is an ``httpx.AsyncClient`` on it; ``call`` sends one request by
    hand, for what a client library cannot do (stop before the body, disconnect)."""

    def __init__(self, gateway: Gateway, config: Path) -> None:
        self.gateway = gateway
        self.config = config
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=gateway.proxy_app), base_url="http://gateway"
        )

    async def add_key(self, team: str = "t", **options: Any) -> str:
        """A new key in ``team``; ``options`` go to ``Keys.create`` (``limits``, …)."""
        created = await self.gateway.tenancy.keys.create(
            Actor.operator("tests"), team=team, **options
        )
        return created.secret

    async def call(
        self,
        path: str,
        body: dict[str, Any],
        *,
        key: str = TEST_KEY,
        headers: Mapping[str, str] | None = None,
        disconnect: asyncio.Event | None = None,
        at_message: Callable[[dict[bytes, bytes], dict[str, Any]], None] | None = None,
    ) -> Answer:
        """POST ``body`` to ``path``; with ``disconnect``, the client goes away when it is
        set (the body sent, the answer not yet read); ``at_message`` is called with the
        answer's headers and each body message as it reaches the server."""
        data = orjson.dumps(body)
        raw = [
            (b"authorization", f"Bearer {key}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
        ]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": raw,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }
        reads = 0
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal reads
            reads += 1
            if reads == 1:
                return {"type": "http.request", "body": data, "more_body": False}
            if disconnect is not None:
                await disconnect.wait()
            else:
                await done.wait()
            return {"type": "http.disconnect"}

        status, got, chunks = 0, {}, []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                got.update(message.get("headers", []))
            elif message["type"] == "http.response.body":
                if at_message is not None:
                    at_message(got, message)
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        await self.gateway.proxy_app(scope, receive, send)
        done.set()
        return Answer(status, got, b"".join(chunks), reads)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the gateway's own metrics registry (0 when never counted)."""
        value = self.gateway.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


StartGateway = Callable[..., Awaitable[InProcess]]


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    """A simulated vLLM engine serving model ``m``, answering at once."""
    with SimProcess("--model", "m", "--speed", "0") as engine:
        yield engine


@pytest.fixture
def other_sim() -> Iterator[SimProcess]:
    """A second engine like ``sim``, for a second replica."""
    with SimProcess("--model", "m", "--speed", "0") as engine:
        yield engine


@pytest.fixture
async def start_gateway(tmp_path: Path) -> AsyncIterator[StartGateway]:
    """``await start_gateway(models, **sections)``: the Gateway of the configuration
    ``tests.e2e.conftest.write_config`` writes (SQLite in ``tmp_path`` holding
    ``TEST_KEY``), started here and stopped after the test."""
    started: list[InProcess] = []

    async def start(models: list[dict[str, Any]], **sections: Any) -> InProcess:
        directory = tmp_path / f"gw{len(started)}"
        directory.mkdir()
        # write_config provisions the store in an event loop of its own
        path = await asyncio.to_thread(write_config, directory, models, **sections)
        gateway = Gateway(load_config(path))
        await gateway.start()
        running = InProcess(gateway, path)
        started.append(running)
        return running

    yield start
    for running in started:
        await running.client.aclose()
        await running.gateway.stop()
