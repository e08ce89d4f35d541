"""Throughput mode: C keep-alive connections as fast as they go, each leg in turn.

The run is cut into segments; in each segment every leg (direct, minimal proxy, gateway, …)
gets ``duration / segments`` seconds of C concurrent connections, each sending its next
request as soon as the last one answered (closed loop). The legs' order rotates per
segment, so a burst of load from elsewhere on the machine is spread over all legs rather
than landing on one.

Besides requests per second, the CPU time each server process (and the upstream) spent
during its leg is read from /proc and divided by the requests served: **CPU µs per
request** is the figure least disturbed by other processes, and the one to use to tell
what a layer costs. On a 2-core machine the client, the proxy and the upstream share the
cores, so req/s is a property of the whole set-up; the ratio to the minimal proxy in the
same run is what carries over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from http1 import Connection, connect, request_bytes
from targets import Endpoint

__all__ = ["Leg", "Meter", "ThroughputResult", "measure_throughput"]


@dataclass(slots=True)
class Leg:
    """Totals of one leg over all its segments."""

    requests: int = 0
    errors: int = 0
    seconds: float = 0.0
    server_cpu: float = 0.0
    upstream_cpu: float = 0.0
    first_error: str = ""  # the first non-200 answer (status, start of the body)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        per = 1e6 / self.requests if self.requests else 0.0
        return {
            "requests": self.requests,
            "errors": self.errors,
            "seconds": round(self.seconds, 2),
            "rps": round(self.rps, 1),
            "server_cpu_us_per_request": round(self.server_cpu * per, 1),
            "upstream_cpu_us_per_request": round(self.upstream_cpu * per, 1),
            "first_error": self.first_error,
        }


@dataclass(slots=True)
class ThroughputResult:
    concurrency: int
    legs: dict[str, Leg] = field(default_factory=dict)
    reference: str = ""

    def ratio(self, name: str) -> float:
        ref = self.legs[self.reference].rps
        return self.legs[name].rps / ref if ref else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "reference": self.reference,
            "legs": {
                name: {**leg.to_json(), "ratio": round(self.ratio(name), 3)}
                for name, leg in self.legs.items()
            },
        }


async def _worker(conn: Connection, raw: bytes, deadline: float, leg: Leg) -> None:
    while time.monotonic() < deadline:
        try:
            resp = await conn.fetch(raw)
        except ConnectionError as exc:
            leg.errors += 1
            leg.first_error = leg.first_error or f"connection error: {exc}"
            return
        if resp.status == 200:
            leg.requests += 1
        else:
            leg.errors += 1
            leg.first_error = leg.first_error or f"{resp.status} {resp.body[:300]!r}"


class Meter(Protocol):
    """What throughput reads CPU time from: a started process, a group of them, or a
    server elsewhere (``--compare``, which reads as 0)."""

    def cpu_seconds(self) -> float: ...


async def _segment(
    endpoint: Endpoint,
    server: Meter,
    upstream: Meter,
    conns: list[Connection],
    raw: bytes,
    seconds: float,
    leg: Leg,
) -> None:
    for k, conn in enumerate(conns):  # closed while idle between turns (keep-alive timeout)
        if conn.closed:
            conns[k] = await connect(endpoint.host, endpoint.port)
    server_cpu, upstream_cpu = server.cpu_seconds(), upstream.cpu_seconds()
    started = time.monotonic()
    deadline = started + seconds
    workers = asyncio.gather(*(_worker(conn, raw, deadline, leg) for conn in conns))
    try:
        # A server that stops answering must not hang the run: bounded well past the deadline.
        await asyncio.wait_for(workers, seconds + 30.0)
    except TimeoutError:
        leg.errors += sum(not conn.idle for conn in conns)
        for conn in conns:
            conn.close()
    leg.seconds += time.monotonic() - started
    if server is not upstream:
        leg.server_cpu += server.cpu_seconds() - server_cpu
    leg.upstream_cpu += upstream.cpu_seconds() - upstream_cpu
    for k, conn in enumerate(conns):  # reopen what the server closed, for the next segment
        if conn.closed:
            conns[k] = await connect(endpoint.host, endpoint.port)


async def measure_throughput(
    legs: list[tuple[Endpoint, Meter]],
    upstream: Meter,
    *,
    concurrency: int,
    duration: float,
    segments: int,
    body: bytes,
    reference: str,
    around: Callable[[str], AbstractAsyncContextManager[None]] | None = None,
) -> ThroughputResult:
    """``duration`` seconds per leg in total, in ``segments`` turns; ratios to ``reference``."""
    result = ThroughputResult(concurrency=concurrency, reference=reference)
    pools: list[list[Connection]] = []
    raws: list[bytes] = []
    for endpoint, _server in legs:
        pools.append([await connect(endpoint.host, endpoint.port) for _ in range(concurrency)])
        raws.append(
            request_bytes(
                "POST", f"{endpoint.host}:{endpoint.port}", endpoint.path, body, endpoint.headers()
            )
        )
        result.legs[endpoint.name] = Leg()
    try:
        for segment in range(segments):
            for k in range(len(legs)):
                j = (segment + k) % len(legs)
                endpoint, server = legs[j]
                leg = result.legs[endpoint.name]
                # ``around`` wraps each segment of a leg (the Redis command counts)
                async with around(endpoint.name) if around else contextlib.nullcontext():
                    await _segment(
                        endpoint, server, upstream, pools[j], raws[j], duration / segments, leg
                    )
    finally:
        for pool in pools:
            for conn in pool:
                conn.close()
    return result
