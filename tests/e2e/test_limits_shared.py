"""Two gateway processes on one Redis and one PostgreSQL enforce one limit, not two.

Isolation: each test gets a PostgreSQL database of its own, created on the test
server under a random name and dropped (``WITH (FORCE)``, so connections a
gateway left behind do not keep it) when the test ends; both gateways' stores
point at it. The Redis counters live under a random prefix of the test's own
(the ``redis_state`` fixture), and both gateways use that same prefix.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from tests.e2e.conftest import AUTH, StartSim, model
from tests.e2e.test_limits import PRICES, chat, configure, refusal

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow


def two_gateways(
    tmp_path: Path,
    sim: SimProcess,
    database: str,
    state: dict[str, Any],
    **settings: Any,
) -> tuple[Path, Path]:
    """Two configurations (own directories, own ports) sharing the store and the state."""
    configs = []
    for name in ("a", "b"):
        directory = tmp_path / name
        directory.mkdir()
        (directory / "pg.url").write_text(database)
        configs.append(
            configure(
                directory,
                [model("m", sim, cost=PRICES)],
                store={"url_file": "pg.url"},
                state=state,
                **settings,
            )
        )
    return configs[0], configs[1]


def test_two_gateways_share_one_rpm_limit(
    tmp_path: Path, start_sim: StartSim, pg_database: str, redis_state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    first, second = two_gateways(tmp_path, sim, pg_database, redis_state, limits=Limits(rpm=10))
    with GatewayProcess(first) as a, GatewayProcess(second) as b:
        answers = [chat(a if i % 2 == 0 else b) for i in range(20)]
        statuses = [answer.status_code for answer in answers]
        # alternated, so each gateway alone saw at most 10: only a shared count refuses
        assert statuses == [200] * 10 + [429] * 10, statuses
        for answer in answers[10:]:
            assert refusal(answer)[1] == "rpm_limit_exceeded"
            assert "retry-after" in answer.headers
    assert len(sim.requests("/v1/chat/completions")) == 10


def test_two_gateways_share_one_budget_under_concurrent_load(
    tmp_path: Path, start_sim: StartSim, pg_database: str, redis_state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    # room for five requests of 10 micro GPU-hours, estimated and charged alike
    first, second = two_gateways(tmp_path, sim, pg_database, redis_state, budgets=[("team:t", 50)])

    async def load(urls: list[str]) -> list[httpx.Response]:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        async with httpx.AsyncClient(
            headers=AUTH,
            timeout=60,
            limits=httpx.Limits(max_connections=40, max_keepalive_connections=0),
        ) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.post(urls[i % 2] + "/v1/chat/completions", json=body)
                        for i in range(40)
                    )
                )
            )

    with GatewayProcess(first) as a, GatewayProcess(second) as b:
        answers = asyncio.run(load([a.url, b.url]))
        statuses = [answer.status_code for answer in answers]
        # every estimate equals its cost, so the one shared counter admits exactly five
        assert statuses.count(200) == 5, statuses
        assert statuses.count(429) == 35, statuses
        assert {refusal(x)[1] for x in answers if x.status_code == 429} == {"budget_exceeded"}
        for gateway in (a, b):
            assert refusal(chat(gateway, 1))[1] == "budget_exceeded"
    assert len(sim.requests("/v1/chat/completions")) == 5
    # both gateways recorded into the one store (SIGTERM drained them): 42 records, 5 paid
    assert asyncio.run(records(pg_database)) == (42, 50)


async def records(database: str) -> tuple[int, int]:
    conn = await asyncpg.connect(database, timeout=10)
    try:
        row = await conn.fetchrow("SELECT count(*), sum(cost_micro) FROM usage_records")
    finally:
        await conn.close()
    assert row is not None
    return int(row[0]), int(row[1])
