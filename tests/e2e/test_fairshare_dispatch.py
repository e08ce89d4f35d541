"""Priorities decided at dispatch, real processes: one simulated vLLM engine, two organisations.

The load of ``test_fairshare.py`` (pool ``p``, C = 16, shares A 0.8125 / B 0.1875,
64 closed-loop clients per organisation, an engine whose KV cache holds about 33
requests at once), with the gateway holding borrowers in its own queue while the
pool is full (``fairshare.hold_borrowers``, the default) and dispatching the
best one, by its organisation's rank at that moment, as seats free. The control
is the same load with the switch off: every request goes to the engine at once
with the priority of its arrival.

Every figure is the engine's own view: ``GET /sim/batch`` sampled every 0.2 s
(running request ids, traced to an organisation by the ``X-Request-Id`` the
gateway returns) and the generated tokens of ``GET /sim/stats``.

- B's running fraction in every 5-second slice of the 50-second window is within
  ±0.05 of its share, and over the whole window within ±0.02;
- alone, A keeps the KV cache >= 93 % full: holding never starves the engine;
- tokens per second over the window are at most 2 % below the control's;
- the control's slices are printed beside them, not compared: since usage is re-read
  every tenth of a second, frozen priorities swing little more than held ones on
  this load (one run measured a spread of 0.017 held against 0.017 off), and what
  holding buys is the engine's short queue, which is asserted.

docs/fairshare.md ("Priorities decided at dispatch") lists the figures printed
with ``pytest -s``.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import aiohttp
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config
from tests.e2e.test_fairshare import SIM_ARGS, Run, _body, _key_in

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CAPACITY = 16
SHARES = {"A": 0.8125, "B": 0.1875}
CLIENTS = 64
SAMPLE_EVERY = 0.2
SLICE = 5.0


class Measured(Run):
    """A load run with the engine's generated tokens at the start and end of the window."""

    tokens: tuple[int, int] = (0, 0)
    steps: tuple[int, int] = (0, 0)

    def slices(self, org: str) -> list[float]:
        """The organisation's running fraction in each whole ``SLICE`` of the window."""
        start, end = self.measured
        count = int((end - start) // SLICE)
        return [
            self.running_fraction(org, (start + i * SLICE, start + (i + 1) * SLICE))
            for i in range(count)
        ]

    def tokens_per_second(self) -> float:
        return (self.tokens[1] - self.tokens[0]) / (self.measured[1] - self.measured[0])

    def tokens_per_step(self) -> float:
        """Generated tokens per engine step: the engine's throughput in its own time (a
        step is one pass of the GPU), whatever pace the simulator's CPU allowed."""
        return (self.tokens[1] - self.tokens[0]) / (self.steps[1] - self.steps[0])


async def _run(
    sim: str, gateway: str, keys: dict[str, str], *, alone: float, warm: float, measure: float
) -> Measured:
    run = Measured()
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as http:

        async def client(org: str, seed: int) -> None:
            rng = random.Random(seed)
            auth = {"authorization": f"Bearer {keys[org]}"}
            while not stop.is_set():
                url = gateway + "/v1/chat/completions"
                async with http.post(url, json=_body(rng), headers=auth) as answer:
                    await answer.read()
                    if answer.status != 200:
                        run.failures.append(f"{org}: {answer.status} {await answer.text()}")
                        await asyncio.sleep(0.1)
                        continue
                    run.org_of[answer.headers["x-request-id"]] = org
                    run.served[org] += 1

        async def sampler() -> None:
            while True:
                async with http.get(sim + "/sim/batch") as answer:
                    run.samples.append((time.monotonic(), await answer.json()))
                await asyncio.sleep(SAMPLE_EVERY)

        async def generated() -> tuple[int, int]:
            async with http.get(sim + "/sim/stats") as answer:
                stats = await answer.json()
                return int(stats["generation_tokens_total"]), int(stats["steps_total"])

        sampling = asyncio.create_task(sampler())
        clients = [asyncio.create_task(client("A", i)) for i in range(CLIENTS)]
        deadline = time.monotonic() + 60
        while not run.samples or len(run.samples[-1][1]["running"]) < 2 * CAPACITY - 4:
            assert time.monotonic() < deadline, f"A never filled the pool: {run.failures[:3]}"
            await asyncio.sleep(SAMPLE_EVERY)
        filled = time.monotonic()
        await asyncio.sleep(alone)
        run.alone = (filled, time.monotonic())
        clients += [asyncio.create_task(client("B", 1000 + i)) for i in range(CLIENTS)]
        await asyncio.sleep(warm)
        first = await generated()
        started = time.monotonic()
        await asyncio.sleep(measure)
        run.measured = (started, time.monotonic())
        last = await generated()
        run.tokens, run.steps = (first[0], last[0]), (first[1], last[1])
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 120)
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
    return run


def _two_orgs(directory: Path, *, hold: bool, measure: float) -> Measured:
    with SimProcess(*SIM_ARGS) as sim:
        config = write_config(
            directory,
            [model("m", sim, pool="p", cost={"output_per_mtok": 1000.0})],
            pools=[{"name": "p", "capacity": CAPACITY}],
            orgs=[
                {"name": "A", "share": SHARES["A"], "teams": ["t"]},  # TEST_KEY's team
                {"name": "B", "share": SHARES["B"], "teams": ["tb"]},
            ],
            # a 10 s half-life: usage, and so the ranks, move many times in the window
            fairshare={"half_life": "10s", "hold_borrowers": hold},
            health={"interval": "500ms", "timeout": "1s"},
            cache_isolation={"scope": "none"},
            logging={"level": "warning"},
        )
        keys = {"A": TEST_KEY, "B": asyncio.run(_key_in(config, "tb"))}
        with GatewayProcess(config) as gateway:
            run = asyncio.run(_run(sim.url, gateway.url, keys, alone=6, warm=10, measure=measure))
    assert not run.failures, run.failures[:5]
    return run


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    """Borrowers held by the gateway and given their priority at dispatch (the default)."""
    return _two_orgs(tmp_path_factory.mktemp("held"), hold=True, measure=50)


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    """The switch off: every request sent to the engine at once, priority of its arrival."""
    return _two_orgs(tmp_path_factory.mktemp("control"), hold=False, measure=30)


def _spread(slices: list[float]) -> str:
    return f"{min(slices):.3f}–{max(slices):.3f}"


def test_b_runs_its_share_in_every_five_second_slice(held: Measured, control: Measured) -> None:
    slices = held.slices("B")
    flat = control.slices("B")
    whole = held.running_fraction("B", held.measured)
    print(
        f"\nB's running fraction (share {SHARES['B']}): {whole:.3f} over "
        f"{held.measured[1] - held.measured[0]:.0f} s, 5 s slices {_spread(slices)} "
        f"[{' '.join(f'{s:.3f}' for s in slices)}]; switch off: "
        f"{control.running_fraction('B', control.measured):.3f}, slices {_spread(flat)} "
        f"[{' '.join(f'{s:.3f}' for s in flat)}]; engine waiting "
        f"{held.mean(held.measured, 'waiting'):.1f} held vs "
        f"{control.mean(control.measured, 'waiting'):.1f} off"
    )
    assert held.traced(held.measured) >= 0.98
    assert len(slices) >= 9
    assert abs(whole - SHARES["B"]) <= 0.02
    assert all(abs(s - SHARES["B"]) <= 0.05 for s in slices), slices
    # the engine's own queue stays short: the gateway holds the rest (16.4-17.3 waiting
    # against 92.6-93.3 on a quiet machine, 23.5 against 93.2 in one CI run)
    assert held.mean(held.measured, "waiting") < control.mean(control.measured, "waiting") / 3


def test_alone_an_organisation_still_fills_the_engine(held: Measured) -> None:
    kv = held.mean(held.alone, "kv_cache_usage")
    running = held.mean(held.alone, "running")
    waiting = held.mean(held.alone, "waiting")
    print(
        f"\nA alone, borrowers held: KV usage {kv:.3f}, {running:.1f} running, "
        f"{waiting:.1f} waiting"
    )
    assert kv >= 0.93  # as in test_fairshare.py
    assert held.running_fraction("A", held.alone) == 1.0


def test_holding_costs_at_most_two_percent_of_throughput(held: Measured, control: Measured) -> None:
    on, off = held.tokens_per_step(), control.tokens_per_step()
    print(
        f"\ngenerated tokens per engine step, both saturating: {on:.2f} borrowers held, "
        f"{off:.2f} switch off ({(on - off) / off:+.1%}); per second "
        f"{held.tokens_per_second():.0f} and {control.tokens_per_second():.0f}; KV "
        f"{held.mean(held.measured, 'kv_cache_usage'):.3f} and "
        f"{control.mean(control.measured, 'kv_cache_usage'):.3f}"
    )
    assert on >= 0.98 * off
