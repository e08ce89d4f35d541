"""A learned pool capacity with real processes: two simulated engines, one restarted smaller.

Pool ``p`` has ``capacity: auto`` (floor 8, ceiling 200, rises after 5 s of
evidence) over two simulated vLLM engines r0 and r1, each with a KV cache of
768 blocks of 16 tokens (prompts 34–510 tokens, outputs 16–256: about 33
requests at once). Organisations A (share 0.75) and B (0.25) each run 64
closed-loop clients, more than either reservation, so both engines stay
saturated: KV full, requests waiting, preemptions. The gateway learns C from
the engines' metrics. Routing is the default (``chat``, with share-aware
routing on), so the replicas' seats, which follow the learned values, decide
where within-share requests go.

Then r1 is restarted on the same port with half the cache (384 blocks). The
gateway sees it drop out and come back, learns its smaller value again, and
apportions the reservations over the new C. Every fraction is read from the
simulators themselves (``GET /sim/batch`` of both, sampled every 0.25 s, each
running request traced to its organisation by the gateway's ``X-Request-Id``),
as tests/e2e/test_fairshare.py does.

docs/fairshare.md lists the figures this test prints (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from tests.e2e.conftest import TEST_KEY, add_key, model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MASTER = "fg-master-" + "c" * 32
SHARES = {"A": 0.75, "B": 0.25}
CLIENTS = 64
FLOOR, CEILING = 8, 200
SAMPLE_EVERY = 0.25
WARM_UP = 25.0  # seconds of load before the first measurement
SIM_ARGS = (
    "--model", "m", "--speed", "600", "--ttft", "0", "--block-size", "16",
    "--no-prefix-caching", "--record", "0",
)  # fmt: skip
WORDS = [f"w{i}" for i in range(1000)]


@dataclass
class Run:
    """What the run saw: batch samples of both engines, reports, phase times."""

    samples: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    reports: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    org_of: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    before: tuple[float, float] = (0.0, 0.0)
    after: tuple[float, float] = (0.0, 0.0)
    restarted_at: float = 0.0
    relearned_at: float | None = None

    def pool(self, at: float) -> dict[str, Any]:
        """The pool's row of the last report taken at or before ``at``."""
        found = [report for t, report in self.reports if t <= at]
        assert found, "no report before that time"
        row: dict[str, Any] = found[-1]["pools"][0]
        return row

    def running_fraction(self, org: str, span: tuple[float, float]) -> float:
        """The organisation's part of both engines' running batches over ``span``."""
        mine = known = 0
        for at, _, batch in self.samples:
            if span[0] <= at < span[1]:
                for seq in batch["running"]:
                    owner = self.org_of.get(seq["request_id"])
                    if owner is not None:
                        known += 1
                        mine += owner == org
        assert known, "no running request was traced to an organisation"
        return mine / known

    def mean_running(self, replica: str, span: tuple[float, float]) -> float:
        sizes = [
            len(b["running"])
            for at, r, b in self.samples
            if r == replica and span[0] <= at < span[1]
        ]
        assert len(sizes) >= 10, f"only {len(sizes)} samples of {replica}"
        return sum(sizes) / len(sizes)

    def mean_kv(self, replica: str, span: tuple[float, float]) -> float:
        """The replica's mean KV-cache use over ``span``, as the engine reported it."""
        used = [
            float(b["kv_cache_usage"])
            for at, r, b in self.samples
            if r == replica and span[0] <= at < span[1]
        ]
        assert len(used) >= 10, f"only {len(used)} samples of {replica}"
        return sum(used) / len(used)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _body(rng: random.Random) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(24, 500)))}
        ],
        "max_tokens": rng.randint(16, 256),
    }


async def _scenario(
    sims: dict[str, SimProcess], r1_port: int, gateway: GatewayProcess, keys: dict[str, str]
) -> Run:
    run = Run()
    stop = asyncio.Event()
    admin = {"authorization": f"Bearer {MASTER}"}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=60)
    ) as http:

        async def client(org: str, seed: int) -> None:
            rng = random.Random(seed)
            auth = {"authorization": f"Bearer {keys[org]}"}
            while not stop.is_set():
                try:
                    async with http.post(
                        gateway.url + "/v1/chat/completions", json=_body(rng), headers=auth
                    ) as answer:
                        await answer.read()
                        if answer.status == 200:
                            run.org_of[answer.headers["x-request-id"]] = org
                            continue
                        run.failures.append(f"{org}: {answer.status}")
                except aiohttp.ClientError as exc:
                    run.failures.append(f"{org}: {exc!r}")
                await asyncio.sleep(0.1)

        async def sampler(name: str) -> None:
            while True:
                try:
                    async with http.get(sims[name].url + "/sim/batch") as answer:
                        run.samples.append((time.monotonic(), name, await answer.json()))
                except aiohttp.ClientError:
                    pass  # r1 while it restarts
                await asyncio.sleep(SAMPLE_EVERY)

        async def reporter() -> None:
            while True:
                async with http.get(gateway.admin_url + "/admin/fairshare", headers=admin) as got:
                    run.reports.append((time.monotonic(), await got.json()))
                await asyncio.sleep(0.5)

        def values() -> dict[str, int]:
            learned: dict[str, int] = run.reports[-1][1]["pools"][0]["capacity_learned"]["replicas"]
            return learned

        background = [asyncio.create_task(c) for c in (sampler("r0"), sampler("r1"), reporter())]
        clients = [
            asyncio.create_task(client(org, seed)) for seed in range(CLIENTS) for org in ("A", "B")
        ]
        # Both engines learned: each has a value, and C has stood still for 5 s; and the
        # decayed usage has had a half-life (20 s) to rank the organisations (both start
        # at 0, so at first their borrowers come in arrival order).
        loaded = time.monotonic()
        deadline = loaded + 60
        while True:
            await asyncio.sleep(0.5)
            assert time.monotonic() < deadline, f"C never settled: {run.reports[-1:]}"
            if not run.reports:
                continue
            row = run.pool(time.monotonic())
            learned = row["capacity_learned"]
            if (
                len(learned["replicas"]) == 2
                and min(learned["replicas"].values()) > 0
                and learned["changed_at"] is not None
                and time.time() - learned["changed_at"] >= 5
                and time.monotonic() - loaded >= WARM_UP
            ):
                break
        start = time.monotonic()
        await asyncio.sleep(20)
        run.before = (start, time.monotonic())
        old_r1 = values()["m/r1"]

        # r1 restarts with half the KV cache, on the same port.
        run.restarted_at = time.monotonic()
        await asyncio.to_thread(sims["r1"].stop)
        sims["r1"] = await asyncio.to_thread(
            SimProcess(*SIM_ARGS, "--kv-blocks", "384", "--port", str(r1_port)).start
        )
        deadline = run.restarted_at + 60
        while run.relearned_at is None:
            await asyncio.sleep(0.5)
            assert time.monotonic() < deadline, f"r1 not learned again: {run.reports[-1:]}"
            new = values().get("m/r1", 0)
            if 0.3 * old_r1 <= new <= 0.65 * old_r1:  # about half of what it was
                run.relearned_at = time.monotonic()
        await asyncio.sleep(2)  # the within-share slots move to the new reservations
        start = time.monotonic()
        await asyncio.sleep(20)
        run.after = (start, time.monotonic())
        stop.set()
        await asyncio.wait_for(asyncio.gather(*clients), 60)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
    return run


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Run:
    directory = tmp_path_factory.mktemp("learned")
    (directory / "master.key").write_text(MASTER)
    r1_port = _free_port()
    sims = {
        "r0": SimProcess(*SIM_ARGS, "--kv-blocks", "768").start(),
        "r1": SimProcess(*SIM_ARGS, "--kv-blocks", "768", "--port", str(r1_port)).start(),
    }
    try:
        config = write_config(
            directory,
            [
                model(
                    "m",
                    sims["r0"],
                    sims["r1"],
                    pool="p",
                    cost={"output_per_mtok": 1000.0},
                )
            ],
            pools=[
                {
                    "name": "p",
                    "capacity": "auto",
                    "capacity_min": FLOOR,
                    "capacity_max": CEILING,
                    "capacity_rise_after": "5s",
                }
            ],
            orgs=[
                {"name": "A", "share": SHARES["A"], "teams": ["t"]},  # TEST_KEY's team
                {"name": "B", "share": SHARES["B"], "teams": ["tb"]},
            ],
            fairshare={"half_life": "20s"},
            cache_isolation={"scope": "none"},
            master_key_file="master.key",
            logging={"level": "info"},
        )
        keys = {"A": TEST_KEY, "B": add_key(config, "tb")}
        with GatewayProcess(config) as gateway:
            run = asyncio.run(_scenario(sims, r1_port, gateway, keys))
    finally:
        for sim in sims.values():
            sim.stop()
    return run


def test_c_is_learned_from_both_engines_and_relearned_after_a_smaller_restart(
    learned: Run,
) -> None:
    before = learned.pool(learned.before[1])
    after = learned.pool(learned.after[1])
    old, new = before["capacity_learned"]["replicas"], after["capacity_learned"]["replicas"]
    took = (learned.relearned_at or 0) - learned.restarted_at
    print(
        f"\nlearned C {before['capacity']} ({old}), reservations "
        f"{ {o['org']: o['reservation'] for o in before['orgs']} }; r1 restarted with half the "
        f"KV cache, learned again in {took:.1f} s: C {after['capacity']} ({new}), reservations "
        f"{ {o['org']: o['reservation'] for o in after['orgs']} }; reason: "
        f"{after['capacity_learned']['reason']}; running r0 "
        f"{learned.mean_running('r0', learned.after):.1f}, r1 "
        f"{learned.mean_running('r1', learned.after):.1f}; "
        f"{len(learned.failures)} failed requests"
    )
    assert before["capacity_source"] == "auto"
    # Each engine sustains about 30 (what fits at KV 0.9), never the floor nor the ceiling.
    assert all(20 <= v <= 40 for v in old.values()), old
    assert before["capacity"] == sum(old.values())
    # r1 came back with half the cache: its value about halves, r0's stays.
    assert 0.3 <= new["m/r1"] / old["m/r1"] <= 0.65, (old, new)
    assert abs(new["m/r0"] - old["m/r0"]) <= 6
    assert after["capacity"] == sum(new.values()) < before["capacity"]
    assert took <= 60
    # The reservations follow C (Hamilton over 0.75 / 0.25).
    for row in (before, after):
        reserved = {o["org"]: o["reservation"] for o in row["orgs"]}
        assert reserved["A"] + reserved["B"] == row["capacity"]
        assert abs(reserved["B"] - SHARES["B"] * row["capacity"]) <= 0.5


def test_fairness_holds_through_the_change(learned: Run) -> None:
    before = learned.running_fraction("B", learned.before)
    after = learned.running_fraction("B", learned.after)
    print(
        f"\nB's running fraction over both engines: {before:.3f} before the restart, "
        f"{after:.3f} after it (share {SHARES['B']})"
    )
    # After the change the reservations follow the smaller C and B runs its share. Before
    # it, with C close to every seat of both engines, B ran 0.25-0.39 of the batch in
    # the runs docs/fairshare.md lists (borrowers take the seats within-share requests
    # leave; see "Across replicas" there): bounded here below B's half of the clients.
    # the issue's own bound for a short window (20 s here); the runs gave 0.240-0.297
    assert abs(after - SHARES["B"]) <= 0.05
    assert 0.21 <= before <= 0.42
    # Loaded both times: the gateway keeps each engine's learned seats filled, so the
    # fractions are the scheduler's and not an idle engine's. With borrowers held in the
    # gateway the batch follows the learned value rather than the KV cache: r0 ran 25.1
    # (KV 0.73) in one run and 34.5 (KV 0.99) in the next, 23.5 of 26-28 on a loaded
    # machine; so the bound is 0.8 of the learned value, not a KV-bound batch size.
    print(
        f"\nr0 before: running {learned.mean_running('r0', learned.before):.1f}, KV "
        f"{learned.mean_kv('r0', learned.before):.3f}; r1 after: running "
        f"{learned.mean_running('r1', learned.after):.1f}, "
        f"KV {learned.mean_kv('r1', learned.after):.3f}"
    )
    seats_before = learned.pool(learned.before[1])["capacity_learned"]["replicas"]
    seats_after = learned.pool(learned.after[1])["capacity_learned"]["replicas"]
    assert learned.mean_running("r0", learned.before) >= 0.8 * seats_before["m/r0"]
    assert learned.mean_running("r1", learned.after) >= 0.8 * seats_after["m/r1"]
