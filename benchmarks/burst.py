"""Time to first token under a burst: N streams sent at once, each timed to its first token.

The client opens N connections to the proxy first (bounded, so the client's own connects
are not what is measured), then writes N streaming chat completions back to back. A
stream's time to first token runs from the write of its request to the arrival of the
first SSE event carrying content: with the engine's own time to first token at 0, it is
what the proxy adds — reading the request, opening (or reusing) a connection to the
engine, relaying the first chunk — while N others do the same.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from http1 import Connection, Exchange, connect, request_bytes
from summary import summarize
from targets import Endpoint

__all__ = ["BurstResult", "first_content", "measure_burst", "open_connections"]

_TIMEOUT = 60.0


@dataclass(slots=True)
class BurstResult:
    """Each stream's time to first token (ms) over one or more bursts of ``streams``;
    the streams that got none."""

    proxy: str
    streams: int
    rounds: int = 1
    ttft_ms: list[float] = field(default_factory=list)
    failed: int = 0
    first_failure: str = ""

    def merge(self, other: BurstResult) -> None:
        """Pool another burst's samples into these (``rounds`` counts the bursts)."""
        self.rounds += other.rounds
        self.ttft_ms += other.ttft_ms
        self.failed += other.failed
        self.first_failure = self.first_failure or other.first_failure

    @property
    def p50(self) -> float:
        return summarize([int(ms * 1e6) for ms in self.ttft_ms]).p50 / 1000

    @property
    def p99(self) -> float:
        return summarize([int(ms * 1e6) for ms in self.ttft_ms]).p99 / 1000

    @property
    def max(self) -> float:
        return max(self.ttft_ms, default=float("nan"))

    def to_json(self) -> dict[str, Any]:
        return {
            "proxy": self.proxy,
            "streams": self.streams,
            "rounds": self.rounds,
            "ttft_p50_ms": round(self.p50, 2),
            "ttft_p99_ms": round(self.p99, 2),
            "ttft_max_ms": round(self.max, 2),
            "failed": self.failed,
            "first_failure": self.first_failure,
        }


def first_content(buffer: bytes) -> bool:
    """Whether the SSE text so far holds a complete event with a non-empty content delta."""
    for event in buffer.split(b"\n\n")[:-1]:  # the last piece may be incomplete
        data = event.strip()
        if not data.startswith(b"data:"):
            continue
        payload = data[5:].strip()
        if payload == b"[DONE]":
            return False
        for choice in orjson.loads(payload).get("choices") or ():
            if (choice.get("delta") or {}).get("content"):
                return True
    return False


async def open_connections(endpoint: Endpoint, count: int) -> list[Connection]:
    """``count`` connections to ``endpoint``, at most 64 connects at a time."""
    gate = asyncio.Semaphore(64)  # bounded burst of connects, well under the listen backlog

    async def one() -> Connection:
        async with gate:
            return await connect(endpoint.host, endpoint.port)

    return list(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), _TIMEOUT))


async def _first_token(exchange: Exchange, sent: int) -> int:
    """Nanoseconds from ``sent`` to the first content event of the stream."""
    assert exchange.chunks is not None
    await exchange.head
    if exchange.status != 200:
        body = b"".join(exchange.body)
        raise ConnectionError(f"status {exchange.status}: {body[:200]!r}")
    seen = b""
    while (chunk := await exchange.chunks.get()) is not None:
        seen += chunk
        if first_content(seen):
            return time.perf_counter_ns() - sent
    raise ConnectionError(f"stream ended without a content token: {seen[:200]!r}")


async def measure_burst(endpoint: Endpoint, streams: int, tokens: int) -> BurstResult:
    """Send ``streams`` streaming requests of ``tokens`` tokens at once through ``endpoint``."""
    result = BurstResult(endpoint.name, streams)
    conns = await open_connections(endpoint, streams)
    body = orjson.dumps(
        {
            "model": "sim-model",
            "messages": [{"role": "user", "content": "Count slowly."}],
            "max_tokens": tokens,
            "ignore_eos": True,
            "stream": True,
        }
    )
    hostport = f"{endpoint.host}:{endpoint.port}"
    raw = request_bytes("POST", hostport, "/v1/chat/completions", body, endpoint.headers())
    try:
        exchanges, waits = [], []
        for conn in conns:
            sent = time.perf_counter_ns()
            exchanges.append(conn.send(raw, stream=True))
            waits.append(_first_token(exchanges[-1], sent))
        outcomes = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), _TIMEOUT)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                result.failed += 1
                result.first_failure = result.first_failure or str(outcome)
            else:
                result.ttft_ms.append(outcome / 1e6)
        # Let every stream finish before the connections go (a close is a disconnect).
        await asyncio.wait_for(
            asyncio.gather(*(ex.response for ex in exchanges), return_exceptions=True),
            _TIMEOUT,
        )
    finally:
        for conn in conns:
            conn.close()
    return result
