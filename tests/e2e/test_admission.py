"""Admission with real processes: 500 low-band requests and a few high-band probes.

One simulated vLLM engine with 32 batch slots (``--max-num-seqs 32``, KV never
short), every request 40 tokens at 40 tokens a second: one second of service.
Pool ``p`` has capacity 32. The low band (bronze, ceiling 0.8) is team ``t``;
the high band (platinum, ceiling 1.5) is team ``hi``. 500 closed-loop bronze
clients send request after request (non-streaming); four high-band probes send
one request at a time with a short pause and record their latency.

- admission on: bronze fills at most 0.8 of the batch and waits in the
  gateway's queue; a high-band request finds a free slot, so its p99 latency
  stays within 1.5x its idle value;
- admission off (no bands) and every request at one priority (no priority
  sent): the 500 requests queue in the engine, first come first served, and a
  high-band request waits behind them: more than 5x its idle p99.

docs/admission.md lists the figures these tests print (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config
from tests.steady_client import steady_client

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor

pytestmark = [pytest.mark.slow, pytest.mark.solo, pytest.mark.timeout(240)]

LOW_CLIENTS = 500
SLOTS = 32
PROBES = 4
SIM_ARGS = (
    "--model", "m", "--speed", "40", "--ttft", "0", "--max-num-seqs", str(SLOTS),
    "--no-prefix-caching", "--record", "0",
)  # fmt: skip
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 40}
BANDS = {
    "queue_size": 1000,
    "queue_ttl": "120s",
    "bands": [
        {"name": "platinum", "ceiling": 1.5, "teams": ["hi"]},
        {"name": "gold", "ceiling": 1.0},
        {"name": "bronze", "ceiling": 0.8, "teams": ["t"]},  # TEST_KEY's team
    ],
}


def p99(latencies: list[float]) -> float:
    """Nearest rank: with fewer than 100 samples, the largest."""
    ordered = sorted(latencies)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


def _gateway(directory: Path, sim: SimProcess, **sections: Any) -> tuple[Path, str]:
    """A config with pool p over ``sim`` and organisation test-org (teams t, hi); the key of hi."""
    config = write_config(
        directory,
        [model("m", sim, pool="p")],
        pools=[{"name": "p", "capacity": SLOTS}],
        orgs=[{"name": "test-org", "share": 1.0, "teams": ["t", "hi"]}],
        cache_isolation={"scope": "none"},
        logging={"level": "warning"},
        # 500 clients on one loopback address: as behind a proxy, no per-network cap
        limits={"max_connections_per_network": None},
        **sections,
    )
    return config, asyncio.run(_key_in(config, "hi"))


async def _key_in(config: Path, team: str) -> str:
    async with open_tenancy(load_config(config)) as tenancy:
        made = await tenancy.keys.create(Actor.operator("tests"), team=team, name="e2e")
        return made.secret


class Load:
    """Closed-loop clients against one gateway, in the test's event loop."""

    def __init__(self, http: aiohttp.ClientSession, gateway: str, sim: str) -> None:
        self.http, self.gateway, self.sim = http, gateway, sim
        self.low_served = 0
        self.failures: list[str] = []

    async def call(self, key: str) -> float:
        started = time.monotonic()
        auth = {"authorization": f"Bearer {key}"}
        async with self.http.post(
            self.gateway + "/v1/chat/completions", json=BODY, headers=auth
        ) as answer:
            await answer.read()
            if answer.status != 200:
                self.failures.append(f"{answer.status} {await answer.text()}")
        return time.monotonic() - started

    async def probes(self, key: str, rounds: int, clients: int = PROBES) -> list[float]:
        """``clients`` high-band probes, ``rounds`` requests each, 0.1–0.4 s apart."""
        latencies: list[float] = []

        async def probe(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(rounds):
                latencies.append(await self.call(key))
                await asyncio.sleep(rng.uniform(0.1, 0.4))

        await asyncio.gather(*(probe(i) for i in range(clients)))
        return latencies

    def flood(self) -> list[asyncio.Task[None]]:
        async def low() -> None:
            while True:
                await self.call(TEST_KEY)
                self.low_served += 1

        return [asyncio.create_task(low()) for _ in range(LOW_CLIENTS)]

    async def batch(self) -> dict[str, Any]:
        async with self.http.get(self.sim + "/sim/batch") as answer:
            result: dict[str, Any] = await answer.json()
            return result

    async def running_while(self, work: Awaitable[list[float]]) -> tuple[list[float], float]:
        """``work``'s result and the mean number of requests running in the engine meanwhile."""
        counts: list[int] = []

        async def sample() -> None:
            while True:
                counts.append(len((await self.batch())["running"]))
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        try:
            result = await work
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        return result, sum(counts) / max(1, len(counts))

    async def until(self, ready: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + 60
        while not await ready():
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.failures[:3]}"
            await asyncio.sleep(0.2)


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=150)
    )


async def _stop(flood: list[asyncio.Task[None]]) -> None:
    for task in flood:
        task.cancel()
    await asyncio.gather(*flood, return_exceptions=True)


def _queue_depth(metrics: str, band: str) -> float:
    prefix = f'fairgate_admission_queue_depth{{band="{band}",pool="p"}}'
    for line in metrics.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no queue depth for band {band}")


async def _with_admission(sim: SimProcess, gateway: GatewayProcess, key: str) -> dict[str, Any]:
    async with _session() as http:
        load = Load(http, gateway.url, sim.url)
        idle = await load.probes(key, rounds=8)
        flood = load.flood()
        try:

            async def bronze_holds_the_engine() -> bool:
                return len((await load.batch())["running"]) >= 0.75 * SLOTS

            await load.until(bronze_holds_the_engine, "bronze to fill the batch")
            await asyncio.sleep(2)  # every bronze client has its request out by now
            async with http.get(gateway.admin_url + "/metrics") as answer:
                queued = _queue_depth(await answer.text(), "bronze")
            served_before = load.low_served
            loaded, running = await load.running_while(load.probes(key, rounds=15))
            served = load.low_served - served_before
        finally:
            await _stop(flood)
    assert not load.failures, load.failures[:5]
    return {"idle": idle, "loaded": loaded, "queued": queued, "running": running, "served": served}


async def _without_admission(sim: SimProcess, gateway: GatewayProcess, key: str) -> dict[str, Any]:
    async with _session() as http:
        load = Load(http, gateway.url, sim.url)
        idle = await load.probes(key, rounds=4)
        flood = load.flood()
        try:

            async def flood_waits_in_the_engine() -> bool:
                return int((await load.batch())["waiting"]) >= LOW_CLIENTS - 2 * SLOTS

            await load.until(flood_waits_in_the_engine, "the flood to queue in the engine")
            loaded, running = await load.running_while(load.probes(key, rounds=1, clients=6))
            batch = await load.batch()
        finally:
            await _stop(flood)
    assert not load.failures, load.failures[:5]
    return {"idle": idle, "loaded": loaded, "running": running, "batch": batch}


def test_with_admission_a_high_band_request_keeps_its_idle_latency(tmp_path: Path) -> None:
    with SimProcess(*SIM_ARGS) as sim:
        config, key = _gateway(tmp_path, sim, admission=BANDS)
        # steady_client: the probes time the gateway, not this process's collector
        with GatewayProcess(config) as gateway, steady_client():
            seen = asyncio.run(_with_admission(sim, gateway, key))
    idle, loaded = p99(seen["idle"]), p99(seen["loaded"])
    print(
        f"\nadmission on: high band p99 {loaded:.3f} s under {LOW_CLIENTS} bronze requests, "
        f"idle {idle:.3f} s = {loaded / idle:.2f}x ({len(seen['loaded'])} probes); bronze "
        f"{seen['running']:.1f} running on average, {seen['queued']:.0f} queued in the gateway, "
        f"{seen['served']} served meanwhile"
    )
    # The flood is real: bronze holds the engine and most of it waits in the gateway.
    assert seen["running"] >= 0.7 * SLOTS
    assert seen["queued"] >= LOW_CLIENTS - 2 * SLOTS
    assert seen["served"] >= 100
    assert loaded <= 1.5 * idle


def test_without_admission_a_high_band_request_waits_behind_the_flood(tmp_path: Path) -> None:
    with SimProcess(*SIM_ARGS) as sim:
        # nothing in front of the engine: no priority and no borrower held in the gateway
        config, key = _gateway(
            tmp_path, sim, fairshare={"send_priority": False, "hold_borrowers": False}
        )
        # steady_client: the probes time the gateway, not this process's collector
        with GatewayProcess(config) as gateway, steady_client():
            seen = asyncio.run(_without_admission(sim, gateway, key))
    idle, loaded = p99(seen["idle"]), p99(seen["loaded"])
    print(
        f"\nadmission off, one priority: high band p99 {loaded:.3f} s under {LOW_CLIENTS} "
        f"bronze requests, idle {idle:.3f} s = {loaded / idle:.2f}x; "
        f"{seen['running']:.1f} running, {seen['batch']['waiting']} waiting in the engine"
    )
    assert seen["running"] >= SLOTS - 1
    assert loaded > 5 * idle
