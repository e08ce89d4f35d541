"""Fair share with real processes: a simulated vLLM engine behind the gateway, two organisations.

Pool ``p`` of capacity C = 16 on one simulated engine whose KV cache holds 16
requests of the longest size (768 blocks of 16 tokens; prompts 34–510 tokens,
outputs 16–256, so about 33 run at once). Organisation A has share 0.8125
(reservation 13), B 0.1875 (reservation 3); each has 64 closed-loop clients.
A's clients start first and fill the engine; B's join later. Every figure is
read from the simulator's own view: ``GET /sim/batch`` sampled every 0.2 s
gives the request ids and priorities in the running batch, ``GET /sim/stats``
the preemptions and their priorities; a request id is the gateway's
``X-Request-Id``, which it also returns to the client, so each running
sequence is traced to its organisation. The gateway holds no borrower back
(``fairshare.hold_borrowers: false``): every request waits in the engine's
queue with the priority of its arrival, the mode these tests measure.

- alone, A borrows the whole pool: the KV cache stays >= 93 % full;
- both saturating, B runs its share (0.1875 ± 0.03) of the batch, not its
  half of the clients; the control run, the same load with every request at one
  priority (``fairshare.send_priority: false``), gives B about half;
- once B is back, every preemption hits a borrower (priority >= 10), and B's
  three reserved seats are in use.

docs/fairshare.md lists the figures these tests print (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

CAPACITY = 16
SHARES = {"A": 0.8125, "B": 0.1875}
RESERVED = {"A": 13, "B": 3}
CLIENTS = 64
BORROWING = 10  # every borrowing priority is 10 or more, every within-share one 0 or 1
SAMPLE_EVERY = 0.2

# 600 engine steps (tokens) a second: a request runs about a quarter of a second, the
# pool turns over ~150 requests a second, and the decayed usage halves every 20 s.
SIM_ARGS = (
    "--model", "m", "--speed", "600", "--ttft", "0", "--kv-blocks", "768",
    "--block-size", "16", "--no-prefix-caching", "--record", "0",
)  # fmt: skip
WORDS = [f"w{i}" for i in range(1000)]


@dataclass
class Run:
    """What one load run saw: batch samples, request id → organisation, phase times."""

    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    org_of: dict[str, str] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=lambda: {"A": 0, "B": 0})
    failures: list[str] = field(default_factory=list)
    # (time.monotonic() at the answer, organisation, completion tokens) of every 200
    answers: list[tuple[float, str, int]] = field(default_factory=list)
    alone: tuple[float, float] = (0.0, 0.0)
    measured: tuple[float, float] = (0.0, 0.0)
    stats_b_joined: dict[str, Any] = field(default_factory=dict)
    stats_end: dict[str, Any] = field(default_factory=dict)

    def window(self, span: tuple[float, float]) -> list[dict[str, Any]]:
        return [batch for at, batch in self.samples if span[0] <= at < span[1]]

    def running_fraction(self, org: str, span: tuple[float, float]) -> float:
        """The organisation's part of the running batch, over every sample of ``span``."""
        mine = known = 0
        for batch in self.window(span):
            for seq in batch["running"]:
                owner = self.org_of.get(seq["request_id"])
                if owner is not None:
                    known += 1
                    mine += owner == org
        assert known, "no running request was traced to an organisation"
        return mine / known

    def served_fraction(self, org: str, span: tuple[float, float]) -> float:
        """The organisation's part of the completion tokens answered within ``span``: what
        its decayed usage is charged with (the running fraction also counts prefill and the
        work of preempted sequences, which is done again)."""
        tokens = [(o, n) for at, o, n in self.answers if span[0] <= at < span[1]]
        total = sum(n for _, n in tokens)
        assert total, "no answer within the span"
        return sum(n for o, n in tokens if o == org) / total

    def traced(self, span: tuple[float, float]) -> float:
        """The fraction of running sequences whose organisation is known."""
        seqs = [s for batch in self.window(span) for s in batch["running"]]
        return sum(s["request_id"] in self.org_of for s in seqs) / len(seqs)

    def mean(self, span: tuple[float, float], value: str) -> float:
        batches = self.window(span)
        assert len(batches) >= 10, f"only {len(batches)} samples in the window"
        if value == "running":
            return sum(len(b["running"]) for b in batches) / len(batches)
        return sum(float(b[value]) for b in batches) / len(batches)

    def within_share_running(self, org: str, span: tuple[float, float]) -> float:
        """Mean number of the organisation's within-share requests in the batch."""
        batches = self.window(span)
        count = sum(
            1
            for b in batches
            for s in b["running"]
            if s["priority"] < BORROWING and self.org_of.get(s["request_id"]) == org
        )
        return count / len(batches)

    def preemptions_since_b(self) -> dict[int, int]:
        """Preemptions by priority from the moment B's clients started."""
        before = self.stats_b_joined["preemptions_by_priority"]
        after = self.stats_end["preemptions_by_priority"]
        return {int(p): n - before.get(p, 0) for p, n in after.items() if n - before.get(p, 0) > 0}

    def victims_since_b(self) -> list[dict[str, Any]]:
        new = self.stats_end["preemptions_total"] - self.stats_b_joined["preemptions_total"]
        log: list[dict[str, Any]] = self.stats_end["preempted"]
        assert new <= len(log), "the preemption log lost entries"
        return log[len(log) - new :] if new else []


def _body(rng: random.Random) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(24, 500)))}
        ],
        "max_tokens": rng.randint(16, 256),
    }


async def _run(
    sim: str,
    gateway: str | Sequence[str],
    keys: dict[str, str],
    *,
    alone: float,
    warm: float,
    measure: float,
) -> Run:
    """The load run; with several gateways each request goes to the next one (round robin)."""
    gateways = [gateway] if isinstance(gateway, str) else list(gateway)
    turn = itertools.count()
    run = Run()
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=120)

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as http:

        async def client(org: str, seed: int) -> None:
            rng = random.Random(seed)
            auth = {"authorization": f"Bearer {keys[org]}"}
            while not stop.is_set():
                url = gateways[next(turn) % len(gateways)] + "/v1/chat/completions"
                async with http.post(url, json=_body(rng), headers=auth) as answer:
                    await answer.read()
                    if answer.status != 200:
                        run.failures.append(f"{org}: {answer.status} {await answer.text()}")
                        await asyncio.sleep(0.1)
                        continue
                    run.org_of[answer.headers["x-request-id"]] = org
                    run.served[org] += 1
                    usage = (await answer.json()).get("usage") or {}
                    tokens = int(usage.get("completion_tokens", 0))
                    run.answers.append((time.monotonic(), org, tokens))

        async def sampler() -> None:
            while True:
                async with http.get(sim + "/sim/batch") as answer:
                    run.samples.append((time.monotonic(), await answer.json()))
                await asyncio.sleep(SAMPLE_EVERY)

        async def stats() -> dict[str, Any]:
            async with http.get(sim + "/sim/stats") as answer:
                result: dict[str, Any] = await answer.json()
                return result

        sampling = asyncio.create_task(sampler())
        clients = [asyncio.create_task(client("A", i)) for i in range(CLIENTS)]
        # A fills the engine: its batch is KV-bound and requests queue behind it.
        deadline = time.monotonic() + 60
        while not run.samples or not (
            run.samples[-1][1]["waiting"] > 0
            and len(run.samples[-1][1]["running"]) >= 2 * CAPACITY - 4
        ):
            assert time.monotonic() < deadline, f"A never filled the pool: {run.failures[:3]}"
            await asyncio.sleep(SAMPLE_EVERY)
        filled = time.monotonic()
        await asyncio.sleep(alone)
        run.alone = (filled, time.monotonic())
        run.stats_b_joined = await stats()
        clients += [asyncio.create_task(client("B", 1000 + i)) for i in range(CLIENTS)]
        await asyncio.sleep(warm)
        started = time.monotonic()
        await asyncio.sleep(measure)
        run.measured = (started, time.monotonic())
        run.stats_end = await stats()
        # Every client finishes the request it has out, so every sampled id is traced.
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 120)
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
    return run


def _two_orgs(directory: Path, *, send_priority: bool) -> Run:
    """A simulated engine and a gateway with organisations A and B; the load run's record."""
    with SimProcess(*SIM_ARGS) as sim:
        config = write_config(
            directory,
            [
                model(
                    "m",
                    sim,
                    pool="p",
                    # usage counts generated tokens: what keeps a sequence in the batch
                    cost={"output_per_mtok": 1000.0},
                )
            ],
            pools=[{"name": "p", "capacity": CAPACITY}],
            orgs=[
                {"name": "A", "share": SHARES["A"], "teams": ["t"]},  # TEST_KEY's team
                {"name": "B", "share": SHARES["B"], "teams": ["tb"]},
            ],
            # every request goes to the engine at once: the priorities of arrival, queued
            # there (test_fairshare_dispatch.py holds borrowers in the gateway instead)
            fairshare={
                "half_life": "20s",
                "send_priority": send_priority,
                "hold_borrowers": False,
            },
            cache_isolation={"scope": "none"},
            logging={"level": "warning"},
        )
        keys = {"A": TEST_KEY, "B": asyncio.run(_key_in(config, "tb"))}
        with GatewayProcess(config) as gateway:
            if send_priority:
                run = asyncio.run(_run(sim.url, gateway.url, keys, alone=8, warm=20, measure=50))
            else:
                run = asyncio.run(_run(sim.url, gateway.url, keys, alone=4, warm=6, measure=20))
    assert not run.failures, run.failures[:5]
    return run


async def _key_in(config: Path, team: str) -> str:
    async with open_tenancy(load_config(config)) as tenancy:
        made = await tenancy.keys.create(Actor.operator("tests"), team=team, name="e2e")
        return made.secret


@pytest.fixture(scope="module")
def fair(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Priorities on: the gateway sends each request's fair-share priority."""
    return _two_orgs(tmp_path_factory.mktemp("fair"), send_priority=True)


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The same load with every request at one priority (none sent)."""
    return _two_orgs(tmp_path_factory.mktemp("control"), send_priority=False)


def _assert_saturated(run: Run) -> None:
    # The load is real: the batch is as large as the KV cache allows and requests queue.
    assert run.mean(run.measured, "running") >= 2 * CAPACITY - 4
    assert run.mean(run.measured, "waiting") >= CLIENTS
    assert run.mean(run.measured, "kv_cache_usage") >= 0.9
    assert run.traced(run.measured) >= 0.98


def test_alone_an_organisation_borrows_the_whole_pool(fair: Run) -> None:
    kv = fair.mean(fair.alone, "kv_cache_usage")
    running = fair.mean(fair.alone, "running")
    print(f"\nA alone: KV usage {kv:.3f}, {running:.1f} running for a reservation of 13")
    # 0.974-0.985 in runs on a quiet machine, 0.949 in one CI run: the engine full either
    # way (a reservation alone would hold about 0.4 of it)
    assert kv >= 0.93
    assert running >= 2 * RESERVED["A"]  # borrowing: far more than its reservation
    assert fair.running_fraction("A", fair.alone) == 1.0


def test_both_saturating_b_runs_its_share_not_its_half_of_the_clients(
    fair: Run, control: Run
) -> None:
    shared = fair.running_fraction("B", fair.measured)
    flat = control.running_fraction("B", control.measured)
    span = fair.measured[1] - fair.measured[0]
    print(
        f"\nB's running fraction over {span:.0f} s: {shared:.3f} with fair-share priorities "
        f"(share {SHARES['B']}), {flat:.3f} with every request at one priority; "
        f"{fair.mean(fair.measured, 'running'):.1f} running, "
        f"{fair.mean(fair.measured, 'waiting'):.1f} waiting, "
        f"KV {fair.mean(fair.measured, 'kv_cache_usage'):.3f}; served A {fair.served['A']} "
        f"B {fair.served['B']} (control A {control.served['A']} B {control.served['B']})"
    )
    _assert_saturated(fair)
    _assert_saturated(control)
    assert abs(shared - SHARES["B"]) <= 0.03
    assert abs(flat - 0.5) <= 0.05


def test_once_the_owner_is_back_every_preemption_hits_a_borrower(fair: Run) -> None:
    by_priority = fair.preemptions_since_b()
    victims = fair.victims_since_b()
    owners = {o: fair.within_share_running(o, fair.measured) for o in ("A", "B")}
    print(
        f"\nsince B joined: {sum(by_priority.values())} preemptions by priority "
        f"{dict(sorted(by_priority.items()))}; within-share running A {owners['A']:.1f} "
        f"(reserved 13), B {owners['B']:.1f} (reserved 3)"
    )
    # The pool is contended: preemptions are many, and they are all borrowers.
    assert sum(by_priority.values()) >= 100
    assert min(by_priority) >= BORROWING
    assert all(v["priority"] >= BORROWING for v in victims)
    # Both organisations' borrowers were victims at some point, never a reserved seat,
    # and the reserved seats were in use: B's three, A's thirteen.
    assert {fair.org_of.get(v["request_id"]) for v in victims} >= {"A", "B"}
    assert owners["B"] >= RESERVED["B"] - 0.5
    assert owners["A"] >= RESERVED["A"] - 1.5
