"""The engine seen from outside: preemption choice, header priority, disconnects — real process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def _until(predicate: object, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def tiny_kv() -> Iterator[SimProcess]:
    # 8 blocks of 4 tokens: three requests of 3 + 13 tokens (4 blocks each) cannot all fit.
    with SimProcess("--kv-blocks", "8", "--block-size", "4", "--speed", "20", "--ttft", "0") as sim:
        yield sim


@pytest.fixture(scope="module")
def one_slot() -> Iterator[SimProcess]:
    with SimProcess("--max-num-seqs", "1", "--speed", "60", "--ttft", "0") as sim:
        yield sim


async def test_preemption_picks_the_largest_priority_and_arrival(tiny_kv: SimProcess) -> None:
    tiny_kv.reset()
    plan = [("a0", 0, [101, 102, 103]), ("b5", 5, [201, 202, 203]), ("c5", 5, [301, 302, 303])]
    async with (
        openai.AsyncOpenAI(base_url=tiny_kv.url + "/v1", api_key="x", max_retries=0) as client,
        httpx.AsyncClient(base_url=tiny_kv.url) as control,
    ):
        tasks = []
        for started, (rid, priority, prompt) in enumerate(plan, start=1):
            tasks.append(
                asyncio.create_task(
                    client.completions.create(
                        model="sim-model",
                        prompt=prompt,
                        max_tokens=13,
                        extra_headers={"X-Request-Id": rid, "X-Vllm-Priority": str(priority)},
                    )
                )
            )

            async def admitted(n: int = started) -> bool:
                return bool((await control.get("/sim/stats")).json()["started"] >= n)

            await _until(admitted, f"{rid} to be running")
        replies = await asyncio.gather(*tasks)
        stats = (await control.get("/sim/stats")).json()
    assert all(r.usage is not None and r.usage.completion_tokens == 13 for r in replies)
    victims = [p["request_id"] for p in stats["preempted"]]
    assert victims, "12 blocks were needed and only 8 exist: someone must have been preempted"
    assert victims[0] == "c5"  # largest (priority, arrival) among the running
    assert "a0" not in victims  # a smaller number is never preempted for a larger one
    assert all(p >= 5 for p in stats["preempted_priorities"])
    assert stats["preemptions_total"] == len(victims)
    assert stats["preemptions_by_priority"] == {"5": len(victims)}
    assert stats["kv_blocks_used"] == 0


async def test_header_priority_overrides_the_body(one_slot: SimProcess) -> None:
    one_slot.reset()
    client = openai.AsyncOpenAI(base_url=one_slot.url + "/v1", api_key="x", max_retries=0)
    finished: list[str] = []

    async def ask(rid: str, body_priority: int, header_priority: int | None, tokens: int) -> None:
        headers = {"X-Request-Id": rid}
        if header_priority is not None:
            headers["X-Vllm-Priority"] = str(header_priority)
        await client.completions.create(
            model="sim-model",
            prompt=rid,
            max_tokens=tokens,
            extra_headers=headers,
            extra_body={"priority": body_priority},
        )
        finished.append(rid)

    async with client, httpx.AsyncClient(base_url=one_slot.url) as control:

        async def waiting(n: int) -> bool:
            return bool((await control.get("/sim/stats")).json()["waiting"] >= n)

        async def running() -> bool:
            return bool((await control.get("/sim/stats")).json()["running"] >= 1)

        blocker = asyncio.create_task(ask("blocker", 0, None, 40))
        await _until(running, "the blocker to run")
        # body says urgent, header says lax; then the other way round
        lax = asyncio.create_task(ask("body-urgent", 1, 9, 2))
        await _until(lambda: waiting(1), "the first to wait")
        urgent = asyncio.create_task(ask("header-urgent", 9, 1, 2))
        await _until(lambda: waiting(2), "the second to wait")
        await asyncio.gather(blocker, lax, urgent)
        record = (await control.get("/sim/requests", params={"path": "/v1/completions"})).json()
    assert finished == ["blocker", "header-urgent", "body-urgent"]
    decided = {_request_id(r): r["priority"] for r in record}
    assert decided == {"blocker": 0, "body-urgent": 9, "header-urgent": 1}


def _request_id(entry: dict[str, Any]) -> str:
    return str(next(v for k, v in entry["headers"] if k == "x-request-id"))


async def test_a_disconnect_aborts_and_frees_the_blocks_at_once(one_slot: SimProcess) -> None:
    one_slot.reset()
    # 2,000 tokens at 60 per second would hold the blocks for more than 30 s
    body = {"model": "sim-model", "prompt": [7, 8, 9], "max_tokens": 2000, "stream": True}
    async with httpx.AsyncClient(base_url=one_slot.url, timeout=30) as http:
        async with http.stream("POST", "/v1/completions", json=body) as stream:
            # Hold the line iterator: a dropped one closes the connection when collected.
            lines = stream.aiter_lines()
            events = 0
            while events < 3:
                events += (await anext(lines)).startswith("data: ")
            busy = (await http.get("/metrics")).text
            assert _metric(busy, "vllm:num_requests_running") == 1
            assert _metric(busy, "vllm:kv_cache_usage_perc") > 0
        # leaving the block closes the connection mid-stream
        left_at = time.monotonic()

        async def freed() -> bool:
            text = (await http.get("/metrics")).text
            return (
                _metric(text, "vllm:num_requests_running") == 0
                and _metric(text, "vllm:kv_cache_usage_perc") == 0
            )

        await _until(freed, "the blocks to be freed", timeout=10)
        stats = (await http.get("/sim/stats")).json()
    assert time.monotonic() - left_at < 10
    assert stats["aborted"] == 1 and stats["finished"] == 0
    assert stats["generation_tokens_total"] < 2000


async def test_the_step_loop_paces_tokens_and_stops_cleanly() -> None:
    # The real Engine in this event loop, no sockets: 20 tokens at 100 per second.
    from fairgate.sim.config import SimConfig
    from fairgate.sim.engine import Engine
    from fairgate.sim.kv_cache import root_hash
    from fairgate.sim.sequence import SeqState, Sequence
    from fairgate.sim.stats import SimStats

    engine = Engine(SimConfig(tokens_per_second=100, ttft=0), SimStats())
    engine.start()
    done = asyncio.Event()
    seq = Sequence("s", 0, 0.0, [1, 2, 3], 20, root_hash(None, "m"), lambda i: 9, done.set)
    started = time.monotonic()
    engine.submit(seq)
    while seq.state is not SeqState.FINISHED:
        done.clear()
        await asyncio.wait_for(done.wait(), 10)
    assert time.monotonic() - started >= 0.15  # 20 steps of 10 ms, give or take one
    assert engine.kv.used_blocks == 0
    waiting = Sequence("w", 0, 0.0, [1], 1000, root_hash(None, "m"), lambda i: 9)
    engine.submit(waiting)
    await engine.stop()
    assert waiting.state is SeqState.ABORTED and engine.scheduler.idle
    with pytest.raises(RuntimeError):
        engine.submit(Sequence("late", 0, 0.0, [1], 1, b"", lambda i: 9))
