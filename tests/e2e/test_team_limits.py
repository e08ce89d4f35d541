"""A team's totals bind all its keys together, and admission's tenant is the team.

Opening more keys must buy a team nothing: five keys of one team in a loop get the
team's ``total_rpm`` in all (on the memory and on the Redis back end, and across
two gateways sharing Redis and PostgreSQL), and ten keys of one team waiting for
a saturated pool get the same turns as the one key of another team.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from tests.e2e.conftest import TEST_KEY, StartSim, add_key, model, write_config
from tests.e2e.test_limits import configure, refusal
from tests.e2e.test_limits_shared import two_gateways

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow


OPERATOR = Actor.operator("tests")
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def team_totals(config: Path, team: str, totals: Limits) -> None:
    async def apply() -> None:
        async with open_tenancy(load_config(config)) as tenancy:
            await tenancy.teams.update(OPERATOR, team, totals=totals)

    asyncio.run(apply())


def keys_of_t(config: Path, extra: int) -> list[str]:
    """TEST_KEY and ``extra`` more keys of team t, none with limits of its own."""
    return [TEST_KEY, *(add_key(config, "t") for _ in range(extra))]


def chat_as(gateway: GatewayProcess, secret: str) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json=BODY,
        headers={"authorization": f"Bearer {secret}"},
        timeout=30,
    )


def test_five_keys_of_one_team_share_its_total_rpm(
    tmp_path: Path, start_sim: StartSim, state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = configure(tmp_path, [model("m", sim)], state=state)
    team_totals(config, "t", Limits(rpm=6))
    secrets = keys_of_t(config, 4)
    with GatewayProcess(config) as gateway:
        # GET /me is a request of the team too (metered): it shows the team's count
        me = httpx.get(gateway.url + "/me", headers={"authorization": f"Bearer {secrets[3]}"})
        assert me.json()["team_limits"]["rpm"] == {"limit": 6, "used": 1}, me.text
        assert me.json()["limits"]["rpm"] is None
        answers = [chat_as(gateway, secrets[i % 5]) for i in range(20)]
        statuses = [answer.status_code for answer in answers]
        assert statuses == [200] * 5 + [429] * 15, statuses
        _status, code, message = refusal(answers[5])
        assert code == "team_rpm_limit_exceeded"
        assert message == (
            "Rate limit exceeded: team 't' (all its keys together) may send 6 requests per minute."
        )
        assert "retry-after" in answers[5].headers
    assert len(sim.requests("/v1/chat/completions")) == 5


def test_two_gateways_share_one_team_total(
    tmp_path: Path, start_sim: StartSim, pg_database: str, redis_state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    first, second = two_gateways(tmp_path, sim, pg_database, redis_state)
    team_totals(first, "t", Limits(rpm=10, max_in_flight=50))
    secrets = keys_of_t(first, 4)
    with GatewayProcess(first) as a, GatewayProcess(second) as b:
        answers = [chat_as(a if i % 2 == 0 else b, secrets[i % 5]) for i in range(30)]
        statuses = [answer.status_code for answer in answers]
        # each gateway alone saw 15 requests from five keys: only one shared count refuses
        assert statuses == [200] * 10 + [429] * 20, statuses
        assert {refusal(x)[1] for x in answers[10:]} == {"team_rpm_limit_exceeded"}
    assert len(sim.requests("/v1/chat/completions")) == 10


# -- admission ---------------------------------------------------------------------------

KEYS_A = 10
PER_KEY = 3
SIM_ARGS = (
    "--model", "m", "--speed", "100", "--ttft", "0", "--max-num-seqs", "1",
    "--no-prefix-caching", "--record", "0",
)  # fmt: skip
SLOW = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 20}


def _queued(metrics: str) -> float:
    prefix = 'fairgate_admission_queue_depth{band="shared",pool="p"}'
    for line in metrics.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _turns(gateway: GatewayProcess, team_a: list[str], team_b: str) -> list[str]:
    """Every request of team a queued first, then team b's: who was answered, in order,
    from the moment b's requests joined the queue."""
    order: list[str] = []
    failures: list[str] = []
    joined = asyncio.Event()

    async def call(http: aiohttp.ClientSession, who: str, secret: str) -> None:
        auth = {"authorization": f"Bearer {secret}"}
        async with http.post(
            gateway.url + "/v1/chat/completions", json=SLOW, headers=auth
        ) as answer:
            await answer.read()
            if answer.status != 200:
                failures.append(f"{answer.status} {await answer.text()}")
        if joined.is_set():
            order.append(who)

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=120)
    ) as http:
        a = [
            asyncio.create_task(call(http, "a", secret))
            for _ in range(PER_KEY)
            for secret in team_a
        ]
        deadline = time.monotonic() + 30
        while True:  # until (nearly) all of a's requests wait in the gateway's queue
            async with http.get(gateway.admin_url + "/metrics") as answer:
                if _queued(await answer.text()) >= len(a) - 3:
                    break
            assert time.monotonic() < deadline, f"a never queued: {failures[:3]}"
            await asyncio.sleep(0.05)
        joined.set()
        b = [asyncio.create_task(call(http, "b", team_b)) for _ in range(PER_KEY)]
        await asyncio.gather(*a, *b)
    assert not failures, failures[:3]
    return order


def test_ten_keys_of_one_team_get_one_teams_turn_in_admission(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim(*SIM_ARGS)
    config = write_config(
        tmp_path,
        [model("m", sim, pool="p")],
        pools=[{"name": "p", "capacity": 1}],
        orgs=[{"name": "test-org", "share": 1.0, "teams": ["t", "u"]}],
        admission={
            "queue_size": 1000,
            "queue_ttl": "120s",
            "bands": [{"name": "shared", "ceiling": 1.0, "teams": ["t", "u"]}],
        },
        cache_isolation={"scope": "none"},
        logging={"level": "warning"},
    )
    team_a = keys_of_t(config, KEYS_A - 1)
    team_b = add_key(config, "u")
    with GatewayProcess(config) as gateway:
        order = asyncio.run(_turns(gateway, team_a, team_b))
    # One request runs at a time, so answers come in the order of the grants. With the
    # team as the tenant, a and b take turns once b waits: b's three answers come
    # within the first six or so (one of a's may be granted as b joins, and on a busy
    # machine b's own requests may reach the gateway a few grants apart). With the key
    # as the tenant, b waits behind ten keys' turns for each request: its last answer
    # comes near the 32nd. The bound sits between the two.
    assert order.count("b") == PER_KEY
    last_b = max(i for i, who in enumerate(order) if who == "b")
    assert last_b < KEYS_A + PER_KEY, order
