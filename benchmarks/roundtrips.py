"""Redis round trips and commands per request, counted in a short phase of its own.

A gateway on the Redis back end is started a second time (a replica of the measured one:
same store, same key, same Redis) with its Redis URL pointing at a counting TCP relay,
``CountingRelay``, in front of the benchmark's Redis. Its two upstreams are in this
process too (``RecordingUpstream``), so the relay's and the upstreams' clocks are one.

- **A round trip** is a burst of bytes from the gateway to Redis on one connection that
  follows an answer from Redis (or opens the connection): a pipeline or a Lua script
  sent in one write is one, the commands of one ``MULTI``/``EXEC`` sent together are
  one, two commands where the second waits for the first's answer are two, and two
  connections used at once are two.
- **In or out:** requests go one at a time. A burst between sending request *i* and the
  moment its upstream received it is on the way *in*; one after that and before request
  *i + 1* is sent is on the way *out* (settle may run after the client has its answer,
  so a short pause follows every request). Every moment is ``time.monotonic()``: the
  relay stamps a burst before it forwards it, so a way-in burst is always before the
  arrival it leads to.
- **Background:** the same relay counts an idle stretch before the requests (lease
  refreshes, the change feed, cached reads on a timer); its rate times each window's
  length is subtracted from that window's count, and printed.
- **Commands** come from ``INFO commandstats`` read straight from Redis (not through the
  relay) before and after, per command name, background subtracted the same way.
  Redis counts the commands a Lua script runs too, under their own names.

Nothing here is timed: the figures are counts, the same on any machine.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import redis

from http1 import connect, request_bytes
from instant_upstream import InstantUpstream
from targets import Endpoint

__all__ = [
    "CountingRelay",
    "RecordingUpstream",
    "RoundTrips",
    "command_delta",
    "commandstats",
    "count_round_trips",
]


class CountingRelay:
    """A TCP relay to Redis that notes the time of every client→server burst."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self._target = (host, target_port)
        self._host = host
        self._server: asyncio.Server | None = None
        self.port = 0
        # time.monotonic() of each burst's first byte: not the loop's time, which uvloop
        # keeps to the millisecond, so that a burst and the upstream arrival it causes
        # within one millisecond tie and the burst was counted on the way out
        self.bursts: list[float] = []
        self.connections = 0

    async def start(self) -> CountingRelay:
        self._server = await asyncio.start_server(self._serve, self._host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        # True while the last bytes on this connection went client→server
        state = {"sending": False}

        async def client_to_server() -> None:
            while data := await reader.read(65536):
                if not state["sending"]:
                    state["sending"] = True
                    self.bursts.append(time.monotonic())
                up_writer.write(data)
                await up_writer.drain()

        async def server_to_client() -> None:
            while data := await up_reader.read(65536):
                state["sending"] = False
                writer.write(data)
                await writer.drain()

        tasks = [
            asyncio.ensure_future(client_to_server()),
            asyncio.ensure_future(server_to_client()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()


class _Recording(InstantUpstream):
    arrivals: list[float]

    def on_message_complete(self) -> None:
        if self._parser.get_method() == b"POST":
            self.arrivals.append(time.monotonic())
        super().on_message_complete()


class RecordingUpstream:
    """The instant upstream in this process, noting when each POST arrived."""

    def __init__(self, arrivals: list[float]) -> None:
        self._arrivals = arrivals
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> RecordingUpstream:
        arrivals = self._arrivals

        def protocol() -> _Recording:
            made = _Recording()
            made.arrivals = arrivals
            return made

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(protocol, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


def commandstats(client: redis.Redis) -> Counter[str]:
    """Calls per command name so far (``INFO commandstats``)."""
    info = client.info("commandstats")
    calls: Counter[str] = Counter()
    for name, stats in info.items():
        if name.startswith("cmdstat_"):
            calls[name.removeprefix("cmdstat_")] = int(stats["calls"])
    return calls


def command_delta(before: Counter[str], after: Counter[str]) -> Counter[str]:
    """What ran in between, less the benchmark's own ``INFO`` calls."""
    delta = Counter({name: after[name] - before.get(name, 0) for name in after})
    delta.pop("info", None)
    return +delta


@dataclass(slots=True)
class RoundTrips:
    """Per request: round trips in and out, commands by name; the background they shed."""

    requests: int = 0
    idle_seconds: float = 0.0
    background_bursts_per_s: float = 0.0
    background_commands_per_s: dict[str, float] = field(default_factory=dict)
    raw_in: int = 0
    raw_out: int = 0
    in_per_request: float = 0.0
    out_per_request: float = 0.0
    in_histogram: dict[int, int] = field(default_factory=dict)  # raw bursts in → requests
    out_histogram: dict[int, int] = field(default_factory=dict)
    commands_per_request: dict[str, float] = field(default_factory=dict)
    connections: int = 0

    @property
    def total_per_request(self) -> float:
        return self.in_per_request + self.out_per_request

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "in_per_request": round(self.in_per_request, 3),
            "out_per_request": round(self.out_per_request, 3),
            "total_per_request": round(self.total_per_request, 3),
            "raw_in": self.raw_in,
            "raw_out": self.raw_out,
            "in_histogram": {str(k): v for k, v in sorted(self.in_histogram.items())},
            "out_histogram": {str(k): v for k, v in sorted(self.out_histogram.items())},
            "idle_seconds": round(self.idle_seconds, 2),
            "background_bursts_per_s": round(self.background_bursts_per_s, 3),
            "background_commands_per_s": {
                k: round(v, 3) for k, v in self.background_commands_per_s.items()
            },
            "commands_per_request": {k: round(v, 3) for k, v in self.commands_per_request.items()},
            "relay_connections": self.connections,
        }

    def table(self) -> str:
        lines = [
            f"round trips per request (one at a time, {self.requests} requests): "
            f"in {self.in_per_request:.2f}, out {self.out_per_request:.2f}, "
            f"total {self.total_per_request:.2f}",
            f"  raw bursts in {self.raw_in}, out {self.raw_out}; per request in "
            f"{_hist(self.in_histogram)}, out {_hist(self.out_histogram)}",
            f"  background {self.background_bursts_per_s:.2f} bursts/s over "
            f"{self.idle_seconds:.1f} s idle (subtracted); {self.connections} connections",
            "  commands per request (INFO commandstats, scripts' inner commands included): "
            + (_per(self.commands_per_request) or "none"),
        ]
        return "\n".join(lines)


def _hist(histogram: dict[int, int]) -> str:
    return " ".join(f"{k}×{v}" for k, v in sorted(histogram.items())) or "-"


def _per(values: dict[str, float]) -> str:
    ordered = sorted(values.items(), key=lambda item: -item[1])
    return ", ".join(f"{name} {value:.2f}" for name, value in ordered if round(value, 2))


@contextlib.asynccontextmanager
async def counting_set_up(
    redis_port: int,
) -> AsyncIterator[tuple[CountingRelay, list[str], list[float]]]:
    """The relay and two recording upstreams, closed at the end."""
    arrivals: list[float] = []
    relay = await CountingRelay(redis_port).start()
    upstreams = [await RecordingUpstream(arrivals).start() for _ in range(2)]
    try:
        yield relay, [u.url for u in upstreams], arrivals
    finally:
        for upstream in upstreams:
            await upstream.close()
        await relay.close()


async def count_round_trips(
    endpoint: Endpoint,
    relay: CountingRelay,
    arrivals: list[float],
    client: redis.Redis,
    *,
    body: bytes,
    requests: int,
    warmup: int = 20,
    idle: float = 2.0,
    pause: float = 0.01,
) -> RoundTrips:
    """Warm up, count an idle stretch, then ``requests`` one at a time; every answer must
    be a 200 (a ``RuntimeError`` names the first that is not)."""
    conn = await connect(endpoint.host, endpoint.port)
    raw = request_bytes("POST", f"{endpoint.host}:{endpoint.port}", endpoint.path, body,
                        endpoint.headers())  # fmt: skip

    async def one() -> float:
        sent = time.monotonic()
        resp = await conn.fetch(raw)
        if resp.status != 200:
            raise RuntimeError(f"round-trip phase: {resp.status} {resp.body[:300]!r}")
        await asyncio.sleep(pause)
        return sent

    try:
        for _ in range(warmup):
            await one()
        await asyncio.sleep(0.2)
        # the idle stretch: what the gateway sends Redis with no request
        idle_start, first = time.monotonic(), len(relay.bursts)
        stats0 = commandstats(client)
        await asyncio.sleep(idle)
        stats1 = commandstats(client)
        idle_seconds = time.monotonic() - idle_start
        idle_bursts = len(relay.bursts) - first
        # the requests
        arrivals.clear()
        start_burst = len(relay.bursts)
        started = time.monotonic()
        sends = [await one() for _ in range(requests)]
        ended = time.monotonic()
        stats2 = commandstats(client)
        seconds = time.monotonic() - started
    finally:
        conn.close()
    if len(arrivals) != requests:
        raise RuntimeError(f"round-trip phase: {len(arrivals)} upstream arrivals for {requests}")
    rate = idle_bursts / idle_seconds if idle_seconds else 0.0
    result = RoundTrips(requests=requests, idle_seconds=idle_seconds, connections=relay.connections)
    result.background_bursts_per_s = rate
    ins, outs = [0] * requests, [0] * requests
    for at in relay.bursts[start_burst:]:
        i = bisect.bisect_right(sends, at) - 1
        if i < 0:
            continue
        if at < arrivals[i]:
            ins[i] += 1
        else:
            outs[i] += 1
    bounds = [*sends[1:], ended]
    in_window = sum(arrivals[i] - sends[i] for i in range(requests))
    out_window = sum(bounds[i] - arrivals[i] for i in range(requests))
    result.raw_in, result.raw_out = sum(ins), sum(outs)
    result.in_per_request = max(0.0, result.raw_in - rate * in_window) / requests
    result.out_per_request = max(0.0, result.raw_out - rate * out_window) / requests
    result.in_histogram = dict(Counter(ins))
    result.out_histogram = dict(Counter(outs))
    background = command_delta(stats0, stats1)
    result.background_commands_per_s = {k: v / idle_seconds for k, v in background.items()}
    measured = command_delta(stats1, stats2)
    result.commands_per_request = {
        name: max(0.0, calls - result.background_commands_per_s.get(name, 0.0) * seconds) / requests
        for name, calls in measured.items()
    }
    return result
