"""Budgets and spend reports through a real gateway and simulated engine.

Prices are one micro GPU-hour per completion token (``PRICES``), so a request
with ``max_tokens=10`` is estimated and charged exactly 10 micro GPU-hours and
a budget of 50 has room for exactly five of them. Budgets are monthly, set in
the store before the gateway starts.

The spent-budget and concurrent cases share one gateway per state back end
(``shared``), each on a team of its own (``b20`` with a budget of 20, ``b50`` with 50).
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
import signal
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from tests.e2e.conftest import AUTH, HEAVIEST_FIRST, StartSim, add_key, model, state_section
from tests.e2e.robust_wire import chat_body, connect, post, read_until, until
from tests.e2e.test_limits import PRICES, chat, configure, refusal
from tests.redis_keys import delete_prefix

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-the-budget-tests"


def master_key(directory: Path) -> str:
    """``master_key_file`` for a config in ``directory``: the file, written there."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "master.key").write_text(MASTER + "\n")
    return "master.key"


def spend(gateway: GatewayProcess, group_by: str, fmt: str = "json") -> httpx.Response:
    today = datetime.now(UTC).date()
    answer = httpx.get(
        gateway.admin_url + "/admin/spend",
        params={
            "from": str(today - timedelta(days=1)),
            "to": str(today + timedelta(days=1)),
            "group_by": group_by,
            "format": fmt,
        },
        headers={"authorization": f"Bearer {MASTER}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer


def stored_records(directory: Path) -> int:
    """How many usage records the gateway's SQLite store in ``directory`` holds."""
    with sqlite3.connect(directory / "fairgate.db") as db:
        count: int = db.execute("SELECT count(*) FROM usage_records").fetchone()[0]
    return count


async def key_exists(url: str, key: str) -> bool:
    client = Redis.from_url(url)
    try:
        return bool(await client.exists(key))
    finally:
        await client.aclose()


def written(gateway: GatewayProcess, requests: int) -> dict[str, Any]:
    """The JSON report's total once the recorder has written ``requests`` records."""
    total: dict[str, Any] = until(
        lambda: (t := spend(gateway, "").json()["total"])["requests"] == requests and t,
        20,
        f"{requests} usage records written",
    )
    return total


def budget_refusal(answer: httpx.Response, scope: str) -> None:
    status, code, message = refusal(answer)
    assert (status, code) == (429, "budget_exceeded"), answer.text
    assert message.startswith(f"Budget spent: the monthly budget of {scope} is used up until ")
    assert message.endswith(" 00:00 UTC.")
    # waiting does not help until the period rolls over: no invitation to retry
    assert "retry-after" not in answer.headers


@dataclass(frozen=True, slots=True)
class Shared:
    """A gateway on one state back end; team b20 has a monthly budget of 20, b50 of 50."""

    config: Path
    gateway: GatewayProcess
    sim: SimProcess

    def served(self) -> int:
        return len(self.sim.requests("/v1/chat/completions"))


@pytest.fixture(scope="module", params=["memory", "redis"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shared]:
    directory = tmp_path_factory.mktemp(f"shared-{request.param}")
    state = state_section(request.param, directory, request)
    with SimProcess("--model", "m", "--speed", "0") as sim:
        config = configure(
            directory,
            [model("m", sim, cost=PRICES)],
            budgets=[("team:b20", 20), ("team:b50", 50)],
            orgs=[{"name": "test-org", "share": 1.0, "teams": ["t", "b20", "b50"]}],
            state=state,
        )
        with GatewayProcess(config) as gateway:
            yield Shared(config, gateway, sim)


def test_a_spent_budget_is_refused_naming_its_scope_without_retry_after(shared: Shared) -> None:
    gateway, key = shared.gateway, add_key(shared.config, "b20")
    before = shared.served()
    assert [chat(gateway, 10, key=key).status_code for _ in range(2)] == [200, 200]
    budget_refusal(chat(gateway, 10, key=key), "team 'b20'")
    # spent is spent, however small the ask
    budget_refusal(chat(gateway, 1, key=key), "team 'b20'")
    assert shared.served() - before == 2


def test_fifty_concurrent_requests_against_room_for_five_pass_five(shared: Shared) -> None:
    gateway, key = shared.gateway, add_key(shared.config, "b50")
    before = shared.served()

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=gateway.url,
            headers={"authorization": f"Bearer {key}"},
            timeout=60,
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=0),
        ) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
            return list(
                await asyncio.gather(
                    *(client.post("/v1/chat/completions", json=body) for _ in range(50))
                )
            )

    answers = asyncio.run(burst())
    statuses = [a.status_code for a in answers]
    assert statuses.count(200) == 5, statuses
    assert statuses.count(429) == 45, statuses
    for answer in answers:
        if answer.status_code == 429:
            budget_refusal(answer, "team 'b50'")
    assert shared.served() - before == 5
    budget_refusal(chat(gateway, 10, key=key), "team 'b50'")


def test_a_kill_mid_stream_keeps_the_streams_reservation_in_the_spend(
    tmp_path: Path, start_sim: StartSim
) -> None:
    """Memory back end: a gateway killed (SIGKILL) with two streams half-way leaves their
    write-ahead entries; the next start charges each its reservation (the whole budget),
    flagged estimated, so the spend the engine did is not lost with the process."""
    sim = start_sim("--model", "m", "--tokens-per-second", "4", "--ttft", "0")
    config = configure(
        tmp_path,
        [model("m", sim, cost=PRICES)],
        budgets=[("team:t", 20)],
        state={"backend": "memory"},
    )
    gateway = GatewayProcess(config).start()
    streams = []
    try:
        for _ in range(2):  # 10 tokens at 4 a second: each runs 2.5 s
            sock = connect(gateway.host, gateway.port)
            post(sock, "/v1/chat/completions", chat_body(stream=True, max_tokens=10))
            streams.append(sock)
        heads = [read_until(s, lambda got: got.count(b"data: {") >= 2, timeout=30) for s in streams]
        assert all(b"[DONE]" not in head for head in heads)
        assert gateway.pid is not None
        os.kill(gateway.pid, signal.SIGKILL)
        assert gateway.wait(30) == -signal.SIGKILL
    finally:
        for sock in streams:
            sock.close()
        gateway.stop()
    assert stored_records(tmp_path) == 0  # nothing of the two streams reached the store

    with GatewayProcess(config) as again:  # replays the journal before it serves
        budget_refusal(chat(again, 1), "team 't'")
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        rows = db.execute(
            "SELECT outcome, status, completion_tokens, estimated, cost_micro, attempts"
            " FROM usage_records"
        ).fetchall()
    # the two streams, each its reservation, and the refusal just made
    assert sorted(rows) == [("interrupted", 0, 10, 1, 10, 1)] * 2 + [("refused", 429, 0, 0, 0, 0)]


def _dear_then_cheap(
    tmp_path: Path,
    start_sim: StartSim,
    budgets: Sequence[tuple[str, int] | tuple[str, int, str]],
    **extra: Any,
) -> Path:
    """A gateway's configuration: ``big`` (1,000 micro GPU-hours a token) on an engine too
    slow to send its headers within 1 s, falling back to ``small`` (1) on a fast one."""
    slow = start_sim("--model", "big", "--tokens-per-second", "10", "--ttft", "0")
    fast = start_sim("--model", "small", "--speed", "0")
    dear = {"input_per_mtok": 0.0, "output_per_mtok": 1000.0}
    return configure(
        tmp_path,
        [model("big", slow, cost=dear, fallbacks=["small"]), model("small", fast, cost=PRICES)],
        budgets=budgets,
        limits_section={"headers_timeout": "1s"},
        **extra,
    )


def _ask_big_served_by_small(gateway: GatewayProcess) -> None:
    """One request for ``big`` of 100 tokens: ``small`` answers it."""
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={**AUTH, "content-type": "application/json"},
        content=chat_body(stream=False, max_tokens=100, model="big"),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "small"


def test_an_expensive_attempt_that_timed_out_is_charged_at_its_own_prices(
    tmp_path: Path, start_sim: StartSim
) -> None:
    """``big`` (1,000 micro GPU-hours a token) falls back to ``small`` (1) when its engine
    does not answer in time: its engine had the request, so its reservation is charged
    at big's prices, to the team's budget and to big's own; before, the whole charge
    was priced at small's and big's budget was given its reservation back."""
    config = _dear_then_cheap(tmp_path, start_sim, [("team:t", 10**9), ("team:t", 10**9, "big")])
    with GatewayProcess(config) as gateway:
        _ask_big_served_by_small(gateway)
        me = httpx.get(gateway.url + "/me", headers=AUTH, timeout=10).json()
    spent = {budget["model"]: budget["spent_micro"] for budget in me["budgets"]}
    assert spent == {None: 100 * 1000 + 100, "big": 100 * 1000}
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        row = until(
            lambda: db.execute(
                "SELECT model, attempts, completion_tokens, estimated, cost_micro"
                " FROM usage_records"
            ).fetchone(),
            20,
            "the usage record written",
        )
    assert row == ("small", 2, 200, 1, 100 * 1000 + 100)


def test_the_dear_attempt_stays_the_dear_models_in_the_records(
    tmp_path: Path, start_sim: StartSim
) -> None:
    """As above, ``big`` timed out and ``small`` answered; then the gateway restarts on the
    memory back end with no snapshot of its counters, so each budget is seeded from the
    usage records. big's own budget is seeded with big's charge and small's with small's
    alone, and the spend report by model shows the same split. Before, the record said
    only ``small``: big's budget came back empty and small's held big's charge too."""
    config = _dear_then_cheap(
        tmp_path,
        start_sim,
        [("team:t", 10**9), ("team:t", 10**9, "big"), ("team:t", 10**9, "small")],
        state={"backend": "memory"},
        master_key_file=master_key(tmp_path),
    )
    charged = {None: 100 * 1000 + 100, "big": 100 * 1000, "small": 100}

    def spent(gateway: GatewayProcess) -> dict[str | None, int]:
        me = httpx.get(gateway.url + "/me", headers=AUTH, timeout=10).json()
        return {budget["model"]: budget["spent_micro"] for budget in me["budgets"]}

    with GatewayProcess(config) as gateway:
        _ask_big_served_by_small(gateway)
        total = written(gateway, 1)
        report = spend(gateway, "model").json()
        assert spent(gateway) == charged  # as charged at the time
    by_model = {row["model"]: (row["requests"], row["cost_micro"]) for row in report["data"]}
    # the request once, under the model that answered; big's charge under big
    assert by_model == {"big": (0, 100 * 1000), "small": (1, 100)}
    assert (total["requests"], total["cost_micro"]) == (1, charged[None])
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        db.execute("DELETE FROM counter_snapshots")  # a restart with no snapshot to restore
    with GatewayProcess(config) as gateway:
        assert spent(gateway) == charged  # seeded from the records


def test_retries_after_unanswered_attempts_keep_a_budget_within_one_reservation(
    tmp_path: Path, start_sim: StartSim, state: dict[str, Any]
) -> None:
    """Replica r0, tried first, takes every request and never answers in time; r1 answers.
    An attempt on r0 is charged its reservation on top of the one that serves, so a retry
    is made only while the budget takes one more reservation, as an admission is: twenty
    requests at once against room for five end the budget at most one reservation above
    its cap. Before, every admitted request's retry was made and the budget ended at
    twice its cap (three times with two such replicas)."""
    stalled = start_sim("--model", "m", "--speed", "0", "--stall-before-headers", "3s")
    good = start_sim("--model", "m", "--speed", "0")
    upstreams = [{"name": "r0", "url": stalled.url, "weight": 2}, {"name": "r1", "url": good.url}]
    config = configure(
        tmp_path,
        [model("m", upstreams=upstreams, routing=HEAVIEST_FIRST, cost=PRICES)],
        budgets=[("team:t", 50)],
        limits_section={"headers_timeout": "1s"},
        proxy={"retries": 2},
        state=state,
    )

    async def burst(url: str) -> list[int]:
        async with httpx.AsyncClient(
            base_url=url,
            headers=AUTH,
            timeout=60,
            limits=httpx.Limits(max_connections=20, max_keepalive_connections=0),
        ) as client:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
            answers = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body) for _ in range(20))
            )
            return [a.status_code for a in answers]

    with GatewayProcess(config) as gateway:
        statuses = asyncio.run(burst(gateway.url))
        assert statuses.count(429) >= 15, statuses  # admission: room for five
        with sqlite3.connect(tmp_path / "fairgate.db") as db:
            records = until(
                lambda: (
                    rows
                    if len(
                        rows := db.execute(
                            "SELECT status, attempts, cost_micro FROM usage_records"
                            " WHERE status != 429"
                        ).fetchall()
                    )
                    == 20 - statuses.count(429)
                    else None
                ),
                20,
                "the admitted requests' records",
            )
        me = httpx.get(gateway.url + "/me", headers=AUTH, timeout=10).json()
    [budget] = me["budgets"]
    assert budget["spent_micro"] == sum(cost for _, _, cost in records)
    assert budget["spent_micro"] <= 50 + 10, (records, statuses)
    # every admitted request reached r0, which had it: each is charged at least that
    assert all(attempts >= 1 and cost >= 10 for _, attempts, cost in records), records


def test_a_restart_keeps_the_spend_of_the_period(tmp_path: Path, start_sim: StartSim) -> None:
    """Memory back end, SQLite store: the counters die with the process, the spend does not."""
    sim = start_sim("--model", "m", "--speed", "0")
    config = configure(
        tmp_path,
        [model("m", sim, cost=PRICES)],
        budgets=[("team:t", 20)],
        state={"backend": "memory"},
    )
    with GatewayProcess(config) as gateway:
        assert [chat(gateway, 10).status_code for _ in range(2)] == [200, 200]
        budget_refusal(chat(gateway, 10), "team 't'")
    # SIGTERM wrote every record; the new process restores the spend from them
    with GatewayProcess(config) as gateway:
        budget_refusal(chat(gateway, 10), "team 't'")
        budget_refusal(chat(gateway, 1), "team 't'")
    assert len(sim.requests("/v1/chat/completions")) == 2


def test_spend_is_restored_again_when_redis_loses_its_data(
    tmp_path: Path, start_sim: StartSim, redis_state: dict[str, Any], redis_url: str
) -> None:
    """A Redis restarted without persistence forgets every counter. The next request with a
    budget finds the restore mark gone in the same script that checks its budget, and waits
    while the gateway restores the spend from the records: refused at once, not served on
    the empty counter until the next budget refresh (an hour away here)."""
    sim = start_sim("--model", "m", "--speed", "0")
    config = configure(
        tmp_path,
        [model("m", sim, cost=PRICES)],
        budgets=[("team:t", 20)],
        state={**redis_state, "budget_refresh": "1h"},
    )
    with GatewayProcess(config) as gateway:
        assert [chat(gateway, 10).status_code for _ in range(2)] == [200, 200]
        budget_refusal(chat(gateway, 10), "team 't'")
        until(lambda: stored_records(tmp_path) == 3, 20, "the 3 records in the store")
        asyncio.run(delete_prefix(redis_url, redis_state["prefix"]))
        mark = redis_state["prefix"] + "restored-spend"
        assert not asyncio.run(key_exists(redis_url, mark))
        budget_refusal(chat(gateway, 10), "team 't'")
        assert asyncio.run(key_exists(redis_url, mark))  # written back after the counters
    assert len(sim.requests("/v1/chat/completions")) == 2


def test_a_tag_budget_binds_the_requests_carrying_the_tag(
    tmp_path: Path, start_sim: StartSim, state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = configure(
        tmp_path,
        [model("m", sim, cost=PRICES)],
        budgets=[("tag:blue", 20)],  # proxy-wide: every tenant's requests carrying it
        state=state,
        master_key_file=master_key(tmp_path),
        tags={"allowed": ["blue", "red"]},
    )
    with GatewayProcess(config) as gateway:
        assert chat(gateway, 10, tags="blue").status_code == 200
        assert chat(gateway, 10, tags="red, blue").status_code == 200
        budget_refusal(chat(gateway, 10, tags="blue"), "tag 'blue'")
        budget_refusal(chat(gateway, 10, tags="blue,red"), "tag 'blue'")
        # the same key without the tag is not under that budget
        assert chat(gateway, 10, tags="red").status_code == 200
        assert chat(gateway, 10).status_code == 200
        written(gateway, 6)
        rows = {r["tag"]: r for r in spend(gateway, "tag").json()["data"]}
        # refused requests leave a record too, at no cost
        assert {t: (r["requests"], r["cost_micro"]) for t, r in rows.items()} == {
            "blue": (4, 20),
            "red": (3, 20),
            None: (1, 10),  # the untagged record
        }


def test_report_totals_equal_the_records_in_every_format(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--model", "n", "--speed", "0")
    prices = {"input_per_mtok": 2.0, "output_per_mtok": 7.0}
    config = configure(
        tmp_path,
        [model("m", sim, cost=prices), model("n", sim, cost=prices)],
        master_key_file=master_key(tmp_path),
    )
    with GatewayProcess(config) as gateway:
        sent = 0
        for tokens in (1, 5, 9, 13):
            for name in ("m", "n"):
                answer = httpx.post(
                    gateway.url + "/v1/chat/completions",
                    json={
                        "model": name,
                        "messages": [{"role": "user", "content": "hello " * tokens}],
                        "max_tokens": tokens,
                    },
                    headers=AUTH,
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text
                sent += 1
        total = written(gateway, sent)
        with sqlite3.connect(tmp_path / "fairgate.db") as db:
            records = db.execute(
                "SELECT count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_micro)"
                " FROM usage_records"
            ).fetchone()
        assert records[0] == sent
        expected = {
            "requests": records[0],
            "prompt_tokens": records[1],
            "completion_tokens": records[2],
            "cost_micro": records[3],
        }
        assert records[3] > 0

        def summed(rows: list[dict[str, str]]) -> dict[str, int]:
            return {
                "requests": sum(int(r["requests"]) for r in rows),
                "prompt_tokens": sum(int(r["prompt_tokens"]) for r in rows),
                "completion_tokens": sum(int(r["completion_tokens"]) for r in rows),
                # six decimals printed from the integer: exact, no float involved
                "cost_micro": sum(int(r["gpu_hours"].replace(".", "")) for r in rows),
            }

        report = spend(gateway, "model").json()
        assert {k: int(total[k]) for k in expected} == expected
        assert len(report["data"]) == 2
        assert summed(report["data"]) == expected
        assert sum(int(r["cost_micro"]) for r in report["data"]) == expected["cost_micro"]
        as_csv = list(csv.DictReader(io.StringIO(spend(gateway, "model", "csv").text)))
        assert summed(as_csv) == expected
        lines = spend(gateway, "model", "parsable2").text.splitlines()
        header = lines[0].split("|")
        as_parsable2 = [dict(zip(header, line.split("|"), strict=True)) for line in lines[1:]]
        assert [r["model"] for r in as_parsable2] == ["m", "n"]
        assert summed(as_parsable2) == expected
