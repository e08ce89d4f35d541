"""Streaming mode: a burst of streams, many concurrent SSE streams, then client disconnects.

Against the simulated engine at a finite token rate and no prefill time (each stream lasts
seconds, so all of them are open at once), the gateway and, when given, the minimal proxy
(the yardstick) in front of the same engine process:

1. **burst** (``burst.py``) — B streams sent at once, each timed from the write of its
   request to its first content token; rounds alternate between the yardstick and the
   gateway, and each one's p50/p99 over all rounds is compared.
2. **complete** — S streams are opened together; each must answer 200, carry exactly the
   requested number of content tokens and end with ``data: [DONE]``. The proxy's RSS is
   sampled meanwhile; its growth over the idle RSS, divided by S, is the memory one open
   stream costs. The proxy's CPU time over the phase, divided by the content tokens it
   relayed, is its CPU per relayed token. Run through the yardstick too, for the ratio.
3. **disconnect** — K long streams are opened; once each has delivered a first chunk and
   the engine counts them all running, the client closes every connection. The engine's
   ``running + waiting`` must return to 0: every disconnect reached the engine and freed
   its slot (no GPU generating for nobody). The time that takes is reported.

Everything is bounded: connection set-up, each phase, and the polling of ``/sim/stats``.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

import targets
from burst import BurstResult, measure_burst, open_connections
from http1 import Connection, connect, request_bytes
from services import Service
from summary import summarize
from targets import Endpoint

__all__ = ["StreamingResult", "count_tokens", "measure_streaming"]

_PHASE_TIMEOUT = 120.0
_BURST_ROUNDS = 3  # per proxy, alternating; the first of each is on cold connections


@dataclass(slots=True)
class Completion:
    """One proxy's complete phase: counts, stream durations (s), RSS, CPU per token."""

    proxy: str
    streams: int
    tokens: int
    complete: int = 0
    failed: int = 0
    first_failure: str = ""
    seconds: float = 0.0
    duration_p50: float = 0.0
    duration_p99: float = 0.0
    rss_idle_mib: float = 0.0
    rss_peak_mib: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def kib_per_stream(self) -> float:
        grown = self.rss_peak_mib - self.rss_idle_mib
        return grown * 1024 / self.streams if self.streams else 0.0

    @property
    def cpu_us_per_token(self) -> float:
        relayed = self.complete * self.tokens
        return self.cpu_seconds * 1e6 / relayed if relayed else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kib_per_stream"] = round(self.kib_per_stream, 1)
        data["cpu_us_per_token"] = round(self.cpu_us_per_token, 1)
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in data.items()}

    def lines(self) -> list[str]:
        lines = [
            f"  complete      {self.proxy}: {self.complete}/{self.streams} streams of "
            f"{self.tokens} tokens with [DONE] in {self.seconds:.1f} s (per stream p50 "
            f"{self.duration_p50:.2f} s, p99 {self.duration_p99:.2f} s); failed {self.failed}",
            f"  memory        {self.proxy} RSS {self.rss_idle_mib:.0f} MiB idle, "
            f"{self.rss_peak_mib:.0f} MiB peak: {self.kib_per_stream:.0f} KiB per open stream",
            f"  cpu           {self.proxy} {self.cpu_seconds:.2f} s over the phase: "
            f"{self.cpu_us_per_token:.1f} µs per relayed token",
        ]
        if self.first_failure:
            lines.append(f"  first failure {self.first_failure}")
        return lines


@dataclass(slots=True)
class StreamingResult:
    """The gateway's (``proxy``'s) phases, and the yardstick's burst and complete phases."""

    proxy: str
    streams: int
    tokens: int
    burst: int = 0
    bursts: dict[str, BurstResult] = field(default_factory=dict)
    completions: dict[str, Completion] = field(default_factory=dict)
    yardstick: str = ""
    disconnects: int = 0
    running_before_close: int = 0
    freed: bool = False
    free_seconds: float = 0.0
    aborted: int = 0
    first_failure: str = ""

    @property
    def main(self) -> Completion:
        return self.completions[self.proxy]

    @property
    def complete(self) -> int:
        return self.main.complete

    def ratio(self, figure: str) -> float:
        """The proxy's figure over the yardstick's: ``ttft_p50``, ``ttft_p99`` or
        ``cpu_per_token`` (NaN without a yardstick)."""
        if not self.yardstick:
            return float("nan")
        if figure == "cpu_per_token":
            ours = self.completions[self.proxy].cpu_us_per_token
            theirs = self.completions[self.yardstick].cpu_us_per_token
        else:
            quantile = figure.removeprefix("ttft_")
            ours = getattr(self.bursts[self.proxy], quantile)
            theirs = getattr(self.bursts[self.yardstick], quantile)
        return ours / theirs if theirs else float("nan")

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "proxy": self.proxy,
            "yardstick": self.yardstick,
            "streams": self.streams,
            "tokens": self.tokens,
            **self.main.to_json(),
            "burst": {name: b.to_json() for name, b in self.bursts.items()},
            "completions": {name: c.to_json() for name, c in self.completions.items()},
            "disconnects": self.disconnects,
            "running_before_close": self.running_before_close,
            "freed": self.freed,
            "free_seconds": round(self.free_seconds, 3),
            "aborted": self.aborted,
        }
        if self.yardstick:
            for figure in ("ttft_p50", "ttft_p99", "cpu_per_token"):
                data[f"{figure}_ratio"] = round(self.ratio(figure), 3)
        if self.first_failure:
            data["first_failure"] = self.first_failure
        return data

    def table(self) -> str:
        lines = []
        for burst in self.bursts.values():
            lines.append(
                f"  burst         {burst.proxy}: {burst.streams} streams at once × "
                f"{burst.rounds} rounds, time to first token p50 {burst.p50:.0f} ms, "
                f"p99 {burst.p99:.0f} ms, max {burst.max:.0f} ms; failed {burst.failed}"
                + (f" ({burst.first_failure})" if burst.first_failure else "")
            )
        if self.yardstick and self.bursts:
            lines.append(
                f"  burst ratio   {self.proxy} / {self.yardstick}: p50 "
                f"{self.ratio('ttft_p50'):.2f}, p99 {self.ratio('ttft_p99'):.2f}"
            )
        for completion in self.completions.values():
            lines += completion.lines()
        if self.yardstick:
            lines.append(
                f"  cpu ratio     {self.proxy} / {self.yardstick} per relayed token: "
                f"{self.ratio('cpu_per_token'):.2f}"
            )
        if self.disconnects:
            lines.append(
                f"  disconnect    {self.disconnects} streams closed by the client mid-way "
                f"({self.running_before_close} running at the engine): "
                + (
                    f"engine back to 0 running in {self.free_seconds:.2f} s, {self.aborted} aborted"
                    if self.freed
                    else "engine did NOT return to 0 running"
                )
            )
        if self.first_failure:
            lines.append(f"  first failure {self.first_failure}")
        return "\n".join(lines)


def count_tokens(body: bytes) -> tuple[int, bool]:
    """(content deltas, ended with [DONE]) of an SSE chat-completion stream body."""
    tokens, done = 0, False
    for event in body.split(b"\n\n"):
        data = event.strip()
        if not data.startswith(b"data:"):
            continue
        payload = data[5:].strip()
        if payload == b"[DONE]":
            done = True
            continue
        done = False
        for choice in orjson.loads(payload).get("choices") or ():
            if (choice.get("delta") or {}).get("content"):
                tokens += 1
    return tokens, done


def _rss_mib(service: Service) -> float:
    try:
        status = Path(f"/proc/{service.pid}/status").read_text()
    except OSError:
        return 0.0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _stream_request(endpoint: Endpoint, tokens: int) -> bytes:
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
    return request_bytes("POST", hostport, "/v1/chat/completions", body, endpoint.headers())


async def _sim_stats(sim: Endpoint) -> dict[str, Any]:
    conn = await connect(sim.host, sim.port)
    try:
        resp = await conn.fetch(request_bytes("GET", f"{sim.host}:{sim.port}", "/sim/stats"))
        stats: dict[str, Any] = orjson.loads(resp.body)
        return stats
    finally:
        conn.close()


async def _complete_phase(endpoint: Endpoint, service: Service, result: Completion) -> None:
    conns = await open_connections(endpoint, result.streams)
    raw = _stream_request(endpoint, result.tokens)
    result.rss_idle_mib = _rss_mib(service)
    durations: list[int] = []

    async def one(conn: Connection) -> None:
        t0 = time.perf_counter_ns()
        try:
            resp = await conn.fetch(raw)
        except ConnectionError as exc:
            _fail(result, f"connection lost: {exc}")
            return
        durations.append(time.perf_counter_ns() - t0)
        tokens, done = count_tokens(resp.body) if resp.status == 200 else (0, False)
        if resp.status == 200 and done and tokens == result.tokens:
            result.complete += 1
        else:
            _fail(
                result, f"status {resp.status}, {tokens} tokens, [DONE] {done}: {resp.body[:200]!r}"
            )

    async def sample_rss() -> None:
        while True:
            result.rss_peak_mib = max(result.rss_peak_mib, _rss_mib(service))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample_rss())
    started = time.monotonic()
    cpu_before = service.cpu_seconds()
    try:
        await asyncio.wait_for(asyncio.gather(*(one(c) for c in conns)), _PHASE_TIMEOUT)
    except TimeoutError:
        _fail(result, f"phase not finished after {_PHASE_TIMEOUT:.0f} s")
    finally:
        result.cpu_seconds = service.cpu_seconds() - cpu_before
        sampler.cancel()
        for conn in conns:
            conn.close()
    result.seconds = time.monotonic() - started
    summary = summarize(durations)
    result.duration_p50, result.duration_p99 = summary.p50 / 1e6, summary.p99 / 1e6


def _fail(result: Completion, reason: str) -> None:
    result.failed += 1
    result.first_failure = result.first_failure or reason


async def _wait_stats(sim: Endpoint, done: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    stats = await _sim_stats(sim)
    while not done(stats) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        stats = await _sim_stats(sim)
    return stats


async def _disconnect_phase(
    gateway: Endpoint, sim: Endpoint, tokens: int, result: StreamingResult
) -> None:
    conns = await open_connections(gateway, result.disconnects)
    raw = _stream_request(gateway, tokens)
    exchanges = [conn.send(raw, stream=True) for conn in conns]
    try:
        firsts = (ex.chunks.get() for ex in exchanges if ex.chunks is not None)
        try:
            await asyncio.wait_for(asyncio.gather(*firsts), _PHASE_TIMEOUT)
        except TimeoutError:
            result.first_failure = result.first_failure or "disconnect phase: streams not started"
        stats = await _wait_stats(sim, lambda s: s["running"] >= result.disconnects, 30)
        result.running_before_close = stats["running"]
        aborted_before = stats["aborted"]
    finally:
        for conn in conns:
            conn.close()
    closed = time.monotonic()
    stats = await _wait_stats(sim, lambda s: s["running"] + s["waiting"] == 0, 30)
    result.freed = stats["running"] + stats["waiting"] == 0
    result.free_seconds = time.monotonic() - closed
    result.aborted = stats["aborted"] - aborted_before


async def _bursts(
    legs: list[tuple[Endpoint, Service]], streams: int, tokens: int, result: StreamingResult
) -> None:
    """``_BURST_ROUNDS`` bursts per leg, the legs taking turns (a load from elsewhere on
    the machine then falls on both); each leg's samples pooled over its rounds."""
    for _round in range(_BURST_ROUNDS):
        for endpoint, _service in legs:
            burst = await measure_burst(endpoint, streams, tokens)
            pooled = result.bursts.setdefault(endpoint.name, BurstResult(endpoint.name, streams, 0))
            pooled.merge(burst)


async def measure_streaming(
    proxy: Callable[[str, Path], Service],
    *,
    streams: int,
    tokens: int,
    token_rate: float,
    disconnects: int,
    api_key: str = "",
    burst: int = 0,
    yardstick: Callable[[str, Path], Service] | None = None,
) -> StreamingResult:
    """Start a sim at ``token_rate`` tokens/s per stream and no prefill time, and
    ``proxy(sim_url, workdir)`` in front of it (the gateway, or the minimal proxy alone),
    plus ``yardstick(sim_url, workdir)`` (the minimal proxy) to compare when given; run
    the burst (``burst`` streams, 0: none), complete and disconnect phases."""
    seats = str(max(streams, burst) + disconnects + 16)
    sim_args = ["--tokens-per-second", f"{token_rate:g}", "--ttft", "0", "--max-num-seqs", seats]
    sim_args += ["--kv-blocks", str(64 * (max(streams, burst) + disconnects) + 1024)]
    result = StreamingResult("", streams=streams, tokens=tokens, burst=burst)
    result.disconnects = disconnects
    with (
        tempfile.TemporaryDirectory(prefix="fairgate-bench-") as workdir,
        targets.sim(*sim_args) as sim,
        proxy(sim.url, Path(workdir)) as service,
    ):
        endpoint = Endpoint.of(service.name, service, api_key or service.api_key)
        result.proxy = service.name
        legs = [(endpoint, service)]
        with tempfile.TemporaryDirectory(prefix="fairgate-bench-") as other_dir:
            if yardstick is not None:
                other = yardstick(sim.url, Path(other_dir)).start()
                result.yardstick = other.name
                legs.insert(0, (Endpoint.of(other.name, other, other.api_key), other))
            try:
                if burst:
                    await _bursts(legs, burst, tokens, result)
                for leg, leg_service in legs:
                    completion = Completion(leg.name, streams=streams, tokens=tokens)
                    result.completions[leg.name] = completion
                    await _complete_phase(leg, leg_service, completion)
            finally:
                if yardstick is not None:
                    legs[0][1].stop()
        if disconnects:
            # Long enough to still be running when the client hangs up.
            long_tokens = int(token_rate * _PHASE_TIMEOUT) + tokens
            await _disconnect_phase(endpoint, Endpoint.of("sim", sim), long_tokens, result)
    return result
