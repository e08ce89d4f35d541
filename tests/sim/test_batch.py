"""``GET /sim/batch``: who is in the running batch now, with which priority — real process."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow


async def _batch_when(
    control: httpx.AsyncClient, ready: Any, what: str, timeout: float = 15.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch: dict[str, Any] = (await control.get("/sim/batch")).json()
        if ready(batch):
            return batch
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_batch_lists_running_request_ids_and_priorities() -> None:
    # Two slots: a0 and b7 run, c3 waits; when they end the batch is empty again.
    async with (
        SimProcess("--max-num-seqs", "2", "--speed", "20", "--ttft", "0") as sim,
        httpx.AsyncClient(base_url=sim.url, timeout=30) as http,
    ):

        async def ask(rid: str, priority: int) -> httpx.Response:
            return await http.post(
                "/v1/completions",
                json={"model": "sim-model", "prompt": [1, 2, 3], "max_tokens": 30},
                headers={"X-Request-Id": rid, "X-Vllm-Priority": str(priority)},
            )

        first = [asyncio.create_task(ask("a0", 0)), asyncio.create_task(ask("b7", 7))]
        full = await _batch_when(http, lambda b: len(b["running"]) == 2, "two running")
        late = asyncio.create_task(ask("c3", 3))
        queued = await _batch_when(http, lambda b: b["waiting"] == 1, "one waiting")
        answers = await asyncio.gather(*first, late)
        idle = (await http.get("/sim/batch")).json()
    assert all(a.status_code == 200 for a in answers)
    assert sorted(full["running"], key=lambda s: s["request_id"]) == [
        {"request_id": "a0", "priority": 0},
        {"request_id": "b7", "priority": 7},
    ]
    assert full["kv_cache_usage"] > 0
    assert {s["request_id"] for s in queued["running"]} == {"a0", "b7"}
    assert idle == {"running": [], "waiting": 0, "kv_cache_usage": 0.0}


def test_without_an_engine_the_batch_is_empty() -> None:
    with SimProcess("--speed", "0") as sim:
        assert sim.batch() == {"running": [], "waiting": 0, "kv_cache_usage": 0.0}
