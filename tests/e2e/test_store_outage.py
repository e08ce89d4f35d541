"""PostgreSQL restarted under load, on a server of the test's own: serving goes on, the usage
records of the outage spill to the journal and reach the store once it is back, with no
restart of the gateway, and no record of an answered request is lost or counted twice."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from pathlib import Path

import asyncpg
import httpx
import pytest
from tests.e2e.conftest import AUTH, model, write_config
from tests.e2e.robust_wire import until
from tests.pg_server import private_postgres_server

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def stored(url: str) -> dict[str, int]:
    """request id → how many rows hold it (the key makes it 1; counted to prove it)."""

    async def read() -> dict[str, int]:
        conn = await asyncpg.connect(url, timeout=5)
        try:
            rows = await conn.fetch("SELECT request_id, count(*) FROM usage_records GROUP BY 1")
        finally:
            await conn.close()
        return {row[0]: row[1] for row in rows}

    return asyncio.run(read())


def counter(metrics: str, result: str) -> float:
    prefix = f'fairgate_accounting_records_total{{result="{result}"}} '
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


def test_postgresql_restarted_under_load_loses_no_record(tmp_path: Path) -> None:
    answers: list[tuple[str, int, str]] = []  # request id, status, phase
    phase = ["before"]
    stop = threading.Event()

    def load(gateway: GatewayProcess) -> None:
        with httpx.Client(headers=AUTH, timeout=30) as client:
            while not stop.is_set():
                answer = client.post(
                    gateway.url + "/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                )
                answers.append(
                    (answer.headers.get("x-request-id", ""), answer.status_code, phase[0])
                )
                time.sleep(0.01)

    with private_postgres_server() as pg, SimProcess("--model", "m", "--speed", "0") as sim:
        (tmp_path / "pg.url").write_text(pg.url)
        config = write_config(
            tmp_path,
            [model("m", sim)],
            store={"url_file": "pg.url"},
            accounting={"queue_capacity": 50},  # the outage outlasts the memory queue
        )
        gateway = GatewayProcess(config).start()
        threads = [threading.Thread(target=load, args=(gateway,)) for _ in range(4)]
        try:
            for thread in threads:
                thread.start()
            time.sleep(1.5)
            pg.stop()
            phase[0] = "outage"
            time.sleep(4.0)
            pg.start()
            phase[0] = "after"
            time.sleep(2.0)
            stop.set()
            for thread in threads:
                thread.join(60)
            ok = {rid for rid, status, _ in answers if status == 200}
            # recovery without a restart: the running gateway writes what spilled
            until(lambda: ok <= set(stored(pg.url)), 30, "every answered request stored")
            metrics = httpx.get(gateway.admin_url + "/metrics", timeout=10).text
        finally:
            stop.set()
            assert gateway.stop() == 0
        rows = stored(pg.url)

    by_phase = collections.Counter((p, s) for _, s, p in answers)
    print(f"answers by phase and status: {dict(by_phase)}")
    assert by_phase[("outage", 200)] > 0, "nothing was served while PostgreSQL was down"
    assert by_phase[("after", 200)] > 0
    assert ok <= set(rows)
    assert set(rows.values()) == {1}
    assert counter(metrics, "spilled") > 0, "the outage never outlasted the memory queue"
    assert counter(metrics, "dropped") == 0
    # every answer the clients saw was recorded, whatever its status
    assert {rid for rid, _, _ in answers if rid} <= set(rows)
