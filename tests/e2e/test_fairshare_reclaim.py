"""Reclaim with real processes: a borrower floods an idle pool, then its owners come back.

Two simulated vLLM engines of 8 seats each (``--max-num-seqs 8``), pool C = 16,
organisations A 0.5 (reservation 8), B 0.25 (4) and a hostile H 0.25 (4). While
the pool is idle, H opens 20 streams with ``max_tokens`` 20000 (minutes of output
each): its 4 within-share ones and 12 borrowers take the 16 seats, 4 more borrowers
wait in the engines' queues. A and B then send 8 and 4 streams, all within their
reservations (priority 0). The engine never preempts a running request for a
waiting one at ``max_num_seqs`` (as vLLM), so without reclaim A and B get no token
while H's streams run. With ``fairshare.reclaim_after`` the gateway preempts H's
borrowers itself:

- every request of A and B has its first token within ``reclaim_after`` + a margin;
- 12 of H's streams end with an SSE error event of code ``preempted`` (no more: the
  owners need 12 seats), none of H's within-share streams does;
- the gateway's ``fairgate_fairshare_preemptions_total{org="H"}`` counts them, and
  their usage records say ``preempted``, charged the reservation (flagged estimated);

on the memory state back end and on Redis (reclaim reads only the gateway's own counts).

And with an engine with headroom (``--max-num-seqs 32``, the seats still 8), the
owners' requests run at once: nothing is preempted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from tests.e2e.conftest import TEST_KEY, add_key, model, write_config
from tests.e2e.test_hostile_tenant import records

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SEATS = 8
RECLAIM_AFTER = 2.0
MARGIN = 2.5  # a check interval, a scrape interval (1 s) and the engines' steps


def _sims(stack: ExitStack, max_num_seqs: int) -> list[SimProcess]:
    args = ("--model", "m", "--speed", "50", "--ttft", "0", "--max-num-seqs", str(max_num_seqs))
    return [stack.enter_context(SimProcess(*args)) for _ in range(2)]


def _gateway(
    stack: ExitStack, directory: Path, sims: list[SimProcess], state: dict[str, Any]
) -> tuple[GatewayProcess, dict[str, str], Path]:
    config = write_config(
        directory,
        [model("m", *sims, pool="p", cost={"output_per_mtok": 1000.0})],
        pools=[{"name": "p", "capacity": 2 * SEATS}],
        orgs=[
            {"name": "A", "share": 0.5, "teams": ["t"]},  # TEST_KEY's team
            {"name": "B", "share": 0.25, "teams": ["tb"]},
            {"name": "H", "share": 0.25, "teams": ["th"]},
        ],
        fairshare={"reclaim_after": f"{RECLAIM_AFTER}s"},
        state=state,
        logging={"level": "warning"},
    )
    keys = {
        "A": TEST_KEY,
        "B": add_key(config, "tb", name="b"),
        "H": add_key(config, "th", name="h"),
    }
    gateway = stack.enter_context(GatewayProcess(config))
    return gateway, keys, config


@dataclass
class Stream:
    org: str
    sent: float
    share: str = ""
    request_id: str = ""
    first_token: float | None = None
    error: str | None = None
    status: int = 0
    done: bool = False
    events: list[bytes] = field(default_factory=list)


async def _stream(
    http: aiohttp.ClientSession, url: str, key: str, org: str, max_tokens: int, out: list[Stream]
) -> None:
    s = Stream(org, time.monotonic())
    out.append(s)
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": f"hello from {org}"}],
    }
    async with http.post(
        url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
    ) as answer:
        s.status = answer.status
        s.share = answer.headers.get("x-fairgate-share", "")
        s.request_id = answer.headers.get("x-request-id", "")
        if answer.status != 200:
            s.error = orjson.loads(await answer.read())["error"]["code"]
            return
        async for line in answer.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                s.done = True
                return
            event = orjson.loads(data)
            if "error" in event:
                s.error = event["error"]["code"]
                return
            if s.first_token is None and any(
                (c.get("delta") or {}).get("content") for c in event.get("choices", [])
            ):
                s.first_token = time.monotonic()


async def _engines_full(http: aiohttp.ClientSession, sims: list[SimProcess], running: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        batches = []
        for sim in sims:
            async with http.get(sim.url + "/sim/batch") as answer:
                batches.append(await answer.json())
        if all(len(b["running"]) >= running for b in batches):
            return
        assert time.monotonic() < deadline, f"the engines never filled: {batches}"
        await asyncio.sleep(0.1)


async def _flood_then_owners(
    gw: GatewayProcess, keys: dict[str, str], sims: list[SimProcess], *, owners_for: float
) -> tuple[list[Stream], list[Stream], str]:
    gateway = gw.url
    hostile: list[Stream] = []
    owners: list[Stream] = []
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as http:
        flood = [
            asyncio.create_task(_stream(http, gateway, keys["H"], "H", 20000, hostile))
            for _ in range(20)
        ]
        await _engines_full(http, sims, SEATS)
        await asyncio.sleep(1.0)  # every H stream running or waiting in an engine
        came = [
            asyncio.create_task(_stream(http, gateway, keys[org], org, 40, owners))
            for org, n in (("A", 8), ("B", 4))
            for _ in range(n)
        ]
        await asyncio.wait(came, timeout=owners_for)
        metrics = ""
        async with http.get(gw.admin_url + "/metrics") as answer:
            metrics = await answer.text()
        for task in [*came, *flood]:
            task.cancel()
        await asyncio.gather(*came, *flood, return_exceptions=True)
    return hostile, owners, metrics


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def test_owners_reclaim_their_seats_from_a_flooding_borrower(
    tmp_path: Path, stack: ExitStack, state: dict[str, Any]
) -> None:
    sims = _sims(stack, SEATS)
    gateway, keys, config = _gateway(stack, tmp_path, sims, state)
    hostile, owners, metrics = asyncio.run(
        _flood_then_owners(gateway, keys, sims, owners_for=RECLAIM_AFTER + MARGIN + 5)
    )
    assert len(owners) == 12
    waits = [None if s.first_token is None else round(s.first_token - s.sent, 2) for s in owners]
    print(f"\nowners' time to first token (s): {waits}")
    assert all(s.first_token is not None for s in owners), f"owners starved: {waits}"
    assert max(s.first_token - s.sent for s in owners if s.first_token) <= (
        RECLAIM_AFTER + MARGIN
    ), waits
    assert all(s.error is None and s.done for s in owners), [(s.error, s.done) for s in owners]
    assert all(s.share.startswith("within") for s in owners), [s.share for s in owners]
    preempted = [s for s in hostile if s.error == "preempted"]
    print(f"H's streams preempted: {len(preempted)} of {len(hostile)}")
    assert len(preempted) == 12
    assert all(s.share.startswith("borrowed") for s in preempted)
    assert all(s.first_token is not None for s in preempted)  # cut off mid-stream
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("fairgate_fairshare_preemptions_total")
    ]
    assert counted == ['fairgate_fairshare_preemptions_total{org="H",pool="p"} 12.0'], counted
    # the records, once the gateway stopped (its recorder flushed): a preempted stream's
    # usage report never came, so it is charged its reservation, flagged estimated
    gateway.stop()
    stored = records(config)
    for s in preempted:
        row = stored[s.request_id]
        assert (row["outcome"], row["status"], row["estimated"]) == ("preempted", 200, True)
        assert row["completion_tokens"] == 20000
    assert all(stored[s.request_id]["outcome"] == "ok" for s in owners)


def test_an_engine_with_headroom_runs_the_owners_without_preemption(
    tmp_path: Path, stack: ExitStack
) -> None:
    sims = _sims(stack, 4 * SEATS)
    gateway, keys, _ = _gateway(stack, tmp_path, sims, {"backend": "memory"})
    hostile, owners, _ = asyncio.run(
        _flood_then_owners(gateway, keys, sims, owners_for=RECLAIM_AFTER + MARGIN + 5)
    )
    assert all(s.first_token is not None for s in owners)
    assert max(s.first_token - s.sent for s in owners if s.first_token) < RECLAIM_AFTER
    assert all(s.error is None and s.done for s in owners)
    assert not [s for s in hostile if s.error is not None], [s.error for s in hostile]
