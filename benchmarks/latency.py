"""Latency mode: interleaved rounds on one client, each a direct call and one per proxy.

Every round sends the same request once straight to the upstream and once through each
proxy under test (the minimal proxy, the gateway, …), each leg on its own persistent
keep-alive connection, one request at a time. The order of the legs rotates from round
to round, so no leg always runs first (cold caches) or last. Per round, the *added*
latency of a proxy is its leg minus that round's direct leg: noise that hits the whole
round (another process on the core, a frequency step) cancels out.

Percentiles are taken over the rounds after the warm-up; the garbage collector of this
process is frozen and paused while measuring, so the client's own pauses do not land on
one leg only. ``ratio_p50``/``ratio_p99`` compare each proxy's added latency with the
reference proxy's (the minimal proxy) measured in the same rounds.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

from http1 import connect, request_bytes
from summary import Summary, summarize
from targets import Endpoint

__all__ = ["LatencyResult", "measure_latency"]


@dataclass(slots=True)
class LatencyResult:
    """Per leg: summaries of through and added latency (µs), error count, reference ratios."""

    rounds: int
    direct: Summary
    through: dict[str, Summary] = field(default_factory=dict)
    added: dict[str, Summary] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    reference: str = ""
    first_error: dict[str, str] = field(default_factory=dict)  # per leg: status and body

    def ratio(self, name: str, quantile: str) -> float:
        """name's added latency over the reference's at "p50" or "p99" (NaN if undefined)."""
        mine = getattr(self.added[name], quantile)
        ref = getattr(self.added[self.reference], quantile)
        return mine / ref if ref > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        legs = {
            name: {
                "through": self.through[name].to_json(),
                "added": self.added[name].to_json(),
                "errors": self.errors[name],
                "ratio_p50": round(self.ratio(name, "p50"), 3),
                "ratio_p99": round(self.ratio(name, "p99"), 3),
                "first_error": self.first_error.get(name, ""),
            }
            for name in self.through
        }
        return {
            "rounds": self.rounds,
            "reference": self.reference,
            "direct": self.direct.to_json(),
            "direct_errors": self.errors["direct"],
            "proxies": legs,
        }


async def measure_latency(
    direct: Endpoint,
    proxies: list[Endpoint],
    *,
    rounds: int,
    warmup: int,
    body: bytes,
) -> LatencyResult:
    """Run ``warmup + rounds`` rounds; the first proxy is the reference for the ratios.

    Every answer must be a 200, warm-up included: a leg's first other answer is kept
    (status and the start of its body) for the run to fail with."""
    legs = [direct, *proxies]
    conns = [await connect(leg.host, leg.port) for leg in legs]
    raws = [
        request_bytes("POST", f"{leg.host}:{leg.port}", leg.path, body, leg.headers())
        for leg in legs
    ]
    samples: list[list[int]] = [[] for _ in legs]
    errors = [0] * len(legs)
    first: dict[int, str] = {}
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        for i in range(warmup + rounds):
            start = i % len(legs)
            for k in range(len(legs)):
                j = (start + k) % len(legs)
                t0 = time.perf_counter_ns()
                try:
                    resp = await conns[j].fetch(raws[j])
                    ok = resp.status == 200
                    failure = "" if ok else f"{resp.status} {resp.body[:300]!r}"
                except ConnectionError as exc:
                    ok, failure = False, f"connection error: {exc}"
                elapsed = time.perf_counter_ns() - t0
                if not ok:
                    first.setdefault(j, failure)
                    errors[j] += i < warmup  # counted below for measured rounds
                if i >= warmup:  # failed legs keep their sample so rounds stay paired
                    samples[j].append(elapsed)
                    errors[j] += not ok
                if conns[j].closed:
                    conns[j] = await connect(legs[j].host, legs[j].port)
    finally:
        gc.enable()
        gc.unfreeze()
        for conn in conns:
            conn.close()
    result = LatencyResult(rounds=rounds, direct=summarize(samples[0]), reference=proxies[0].name)
    result.errors["direct"] = errors[0]
    result.first_error = {legs[j].name: text for j, text in first.items()}
    for j, leg in enumerate(proxies, start=1):
        result.through[leg.name] = summarize(samples[j])
        added = [t - d for t, d in zip(samples[j], samples[0], strict=True)]
        result.added[leg.name] = summarize(added)
        result.errors[leg.name] = errors[j]
    return result
