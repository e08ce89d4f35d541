"""The pool against the simulated vLLM engine in its own process: a streamed completion
arrives whole, and closing a response mid-stream stops the engine's work."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import orjson
import pytest

from fairgate.sim.process import SimProcess

from .peer import pool_of

pytestmark = pytest.mark.slow

BOTH_LOOPS = True


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--speed", "50", "--ttft", "0") as process:
        yield process


def chat(max_tokens: int) -> bytes:
    return orjson.dumps(
        {
            "model": "sim-model",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    )


HEADERS = [(b"content-type", b"application/json"), (b"accept", b"text/event-stream")]


async def test_a_streamed_completion_arrives_event_by_event(sim: SimProcess) -> None:
    async with pool_of() as pool:
        for _ in range(2):
            response = await pool.request(
                "POST", sim.host, sim.port, b"/v1/chat/completions", HEADERS, chat(8)
            )
            assert response.status == 200
            assert (response.header(b"content-type") or b"").startswith(b"text/event-stream")
            pieces = []
            async with asyncio.timeout(20):
                while chunk := await response.read_chunk():
                    pieces.append(chunk)
            response.release()
            events = [e for e in b"".join(pieces).split(b"\n\n") if e]
            assert events[-1] == b"data: [DONE]"
            contents = [
                orjson.loads(e[6:])["choices"][0]["delta"].get("content")
                for e in events[:-1]
                if orjson.loads(e[6:])["choices"]
            ]
            assert sum(1 for c in contents if c) == 8
            assert len(pieces) > 1  # streamed, not buffered to the end
        assert pool.idle_connections() == 1  # both on one kept-alive connection


async def test_closing_a_response_mid_stream_aborts_the_engine_work(sim: SimProcess) -> None:
    before = (await asyncio.to_thread(sim.stats))["aborted"]
    async with pool_of() as pool:
        response = await pool.request(
            "POST", sim.host, sim.port, b"/v1/chat/completions", HEADERS, chat(5000)
        )
        async with asyncio.timeout(20):
            assert await response.read_chunk()
        response.close()
    async with asyncio.timeout(20):
        while True:
            stats = await asyncio.to_thread(sim.stats)
            if stats["running"] == 0 and stats["aborted"] == before + 1:
                break
            await asyncio.sleep(0.05)
