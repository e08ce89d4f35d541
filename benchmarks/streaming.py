"""Streaming mode: a burst of streams, many concurrent SSE streams, then client disconnects.

Against simulated engines at a finite token rate and no prefill time (each stream lasts
seconds, so all of them are open at once): the gateway in front of ``engines`` engine
processes (two for the full path, the model's two replicas) and, when given, the minimal
proxy (the yardstick) in front of the first of them:

1. **burst** (``burst.py``) — B streams sent at once, each timed from the write of its
   request to its first content token; rounds alternate between the yardstick and the
   gateway, and each one's p50/p99 over all rounds is compared.
2. **complete** — S streams are opened together; each must answer 200, carry exactly the
   requested number of content tokens and end with ``data: [DONE]``. The proxy's RSS is
   sampled meanwhile; its growth over the idle RSS, divided by S, is the memory one open
   stream costs. The proxy's CPU time over the phase, divided by the content tokens it
   relayed, is its CPU per relayed token. Run through the yardstick too, for the ratio,
   in ``rounds`` rounds (the legs taking turns, each leg's counts and CPU summed over its
   rounds): on a shared machine the ratio of one pair of phases moved by a quarter from
   one pair to the next.
   How many of the phase's streams each engine received (``/sim/stats``) and the
   ``x-fairgate-share`` values of the answers are kept: what shows which path served.
3. **disconnect** — K long streams are opened; once each has delivered a first chunk and
   the engines count them all running, the client closes every connection. The engines'
   ``running + waiting``, summed over every engine, must return to 0: every disconnect
   reached the engine that served it and freed its slot (no GPU generating for nobody).
   The time that takes is reported.

Ratios are the proxy's figure over the yardstick's, each measured in the same run: the
gateway spreads its streams over the engines, the yardstick sends all of them to one;
the figures compared (time to first token, CPU time of the proxy's own process per
relayed token) are each proxy's own, so the engines' count does not enter them.

Everything is bounded: connection set-up, each phase, and the polling of ``/sim/stats``.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
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
    """One proxy's complete phase: counts, stream durations (s), RSS, CPU per token, each
    over its ``rounds`` rounds of ``streams`` streams (the RSS growth over the first)."""

    proxy: str
    streams: int
    tokens: int
    rounds: int = 0
    complete: int = 0
    failed: int = 0
    first_failure: str = ""
    seconds: float = 0.0
    duration_p50: float = 0.0
    duration_p99: float = 0.0
    rss_idle_mib: float = 0.0
    rss_peak_mib: float = 0.0
    cpu_seconds: float = 0.0
    engine_streams: list[int] = field(default_factory=list)  # received per engine, this phase
    share: dict[str, int] = field(default_factory=dict)  # x-fairgate-share value → answers

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
        rounds = f" × {self.rounds} rounds" if self.rounds > 1 else ""
        lines = [
            f"  complete      {self.proxy}: {self.complete}/{self.streams * self.rounds} "
            f"streams{rounds} of {self.tokens} tokens with [DONE], the longest round "
            f"{self.seconds:.1f} s (per stream p50 "
            f"{self.duration_p50:.2f} s, p99 {self.duration_p99:.2f} s); failed {self.failed}",
            f"  memory        {self.proxy} RSS {self.rss_idle_mib:.0f} MiB idle, "
            f"{self.rss_peak_mib:.0f} MiB peak: {self.kib_per_stream:.0f} KiB per open stream",
            f"  cpu           {self.proxy} {self.cpu_seconds:.2f} s over the phases: "
            f"{self.cpu_us_per_token:.1f} µs per relayed token",
        ]
        if self.engine_streams:
            spread = ", ".join(str(n) for n in self.engine_streams)
            lines.append(f"  engines       {self.proxy}: streams received per engine {spread}")
        if self.share:
            shown = ", ".join(f"{value!r} {n}" for value, n in self.share.items())
            lines.append(f"  share         {self.proxy}: x-fairgate-share {shown}")
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
    path: str = ""  # the gateway's path and state ("" for the minimal proxy alone)
    state: str = ""
    engines: int = 1
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
            "path": self.path,
            "state": self.state,
            "engines": self.engines,
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
            figures = ("ttft_p50", "ttft_p99") if self.bursts else ()
            for figure in (*figures, "cpu_per_token"):
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
                f"({self.running_before_close} running at the {self.engines} engine(s)): "
                + (
                    f"engines back to 0 running in {self.free_seconds:.2f} s, "
                    f"{self.aborted} aborted"
                    if self.freed
                    else "engines did NOT return to 0 running"
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


async def _engines_stats(sims: Sequence[Endpoint]) -> dict[str, Any]:
    """``running``, ``waiting``, ``aborted`` summed over the engines; ``received`` of each."""
    each = [await _sim_stats(sim) for sim in sims]
    summed: dict[str, Any] = {k: sum(s[k] for s in each) for k in ("running", "waiting", "aborted")}
    summed["received"] = [s["received"] for s in each]
    return summed


async def _complete_phase(
    endpoint: Endpoint,
    service: Service,
    sims: Sequence[Endpoint],
    result: Completion,
    durations: list[int],
    shares: Counter[str],
) -> None:
    """One round: ``result.streams`` streams at once, added to ``result``'s counts and CPU
    (its stream durations to ``durations``, its answers' share values to ``shares``)."""
    conns = await open_connections(endpoint, result.streams)
    raw = _stream_request(endpoint, result.tokens)
    if not result.rounds:
        result.rss_idle_mib = _rss_mib(service)
    result.rounds += 1
    received_before = (await _engines_stats(sims))["received"]

    async def one(conn: Connection) -> None:
        t0 = time.perf_counter_ns()
        try:
            resp = await conn.fetch(raw)
        except ConnectionError as exc:
            _fail(result, f"connection lost: {exc}")
            return
        durations.append(time.perf_counter_ns() - t0)
        share = resp.headers.get(b"x-fairgate-share")
        if share is not None:
            shares[share.decode("latin-1")] += 1
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
        result.cpu_seconds += service.cpu_seconds() - cpu_before
        sampler.cancel()
        for conn in conns:
            conn.close()
    result.seconds = max(result.seconds, time.monotonic() - started)
    if durations:
        summary = summarize(durations)
        result.duration_p50, result.duration_p99 = summary.p50 / 1e6, summary.p99 / 1e6
    received_after = (await _engines_stats(sims))["received"]
    received = [a - b for a, b in zip(received_after, received_before, strict=True)]
    before = result.engine_streams or [0] * len(received)
    result.engine_streams = [a + b for a, b in zip(before, received, strict=True)]
    result.share = dict(shares.most_common())


def _fail(result: Completion, reason: str) -> None:
    result.failed += 1
    result.first_failure = result.first_failure or reason


async def _wait_stats(sims: Sequence[Endpoint], done: Any, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    stats = await _engines_stats(sims)
    while not done(stats) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        stats = await _engines_stats(sims)
    return stats


async def _disconnect_phase(
    gateway: Endpoint, sims: Sequence[Endpoint], tokens: int, result: StreamingResult
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
        stats = await _wait_stats(sims, lambda s: s["running"] >= result.disconnects, 30)
        result.running_before_close = stats["running"]
        aborted_before = stats["aborted"]
    finally:
        for conn in conns:
            conn.close()
    closed = time.monotonic()
    stats = await _wait_stats(sims, lambda s: s["running"] + s["waiting"] == 0, 30)
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
    proxy: Callable[[list[str], Path], Service],
    *,
    streams: int,
    tokens: int,
    token_rate: float,
    disconnects: int,
    api_key: str = "",
    headers: dict[str, str] | None = None,
    engines: int = 1,
    path: str = "",
    state: str = "",
    burst: int = 0,
    yardstick: Callable[[str, Path], Service] | None = None,
    rounds: int = 3,
) -> StreamingResult:
    """Start ``engines`` sims at ``token_rate`` tokens/s per stream and no prefill time,
    and ``proxy(sim_urls, workdir)`` in front of them (the gateway, or the minimal proxy
    alone), its requests carrying ``headers`` besides the key; plus ``yardstick(sim_url,
    workdir)`` (the minimal proxy, in front of the first sim) to compare when given; run
    the burst (``burst`` streams, 0: none), complete (``rounds`` per leg, the legs taking
    turns) and disconnect phases."""
    # Every engine can hold every stream: how the gateway spreads them is its own choice.
    seats = str(max(streams, burst) + disconnects + 16)
    sim_args = ["--tokens-per-second", f"{token_rate:g}", "--ttft", "0", "--max-num-seqs", seats]
    sim_args += ["--kv-blocks", str(64 * (max(streams, burst) + disconnects) + 1024)]
    result = StreamingResult(
        "", streams=streams, tokens=tokens, burst=burst, path=path, state=state, engines=engines
    )
    result.disconnects = disconnects
    with ExitStack() as stack:
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fairgate-bench-"))
        sims = [stack.enter_context(targets.sim(*sim_args)) for _ in range(engines)]
        service = stack.enter_context(proxy([sim.url for sim in sims], Path(workdir)))
        sim_endpoints = [Endpoint.of(f"sim{k + 1}", sim) for k, sim in enumerate(sims)]
        endpoint = Endpoint.of(service.name, service, api_key or service.api_key, headers)
        result.proxy = service.name
        legs = [(endpoint, service)]
        if yardstick is not None:
            other_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="fairgate-bench-"))
            other = yardstick(sims[0].url, Path(other_dir)).start()
            result.yardstick = other.name
            legs.insert(0, (Endpoint.of(other.name, other, other.api_key), other))
        try:
            if burst:
                await _bursts(legs, burst, tokens, result)
            pooled: dict[str, tuple[Completion, list[int], Counter[str]]] = {
                leg.name: (Completion(leg.name, streams=streams, tokens=tokens), [], Counter())
                for leg, _ in legs
            }
            result.completions.update((name, kept[0]) for name, kept in pooled.items())
            for _round in range(rounds):
                for leg, leg_service in legs:
                    completion, durations, shares = pooled[leg.name]
                    await _complete_phase(
                        leg, leg_service, sim_endpoints, completion, durations, shares
                    )
        finally:
            if yardstick is not None:
                legs[0][1].stop()
        if disconnects:
            # Long enough to still be running when the client hangs up.
            long_tokens = int(token_rate * _PHASE_TIMEOUT) + tokens
            await _disconnect_phase(endpoint, sim_endpoints, long_tokens, result)
    return result
