"""One tenant's flood of cheap requests never costs another tenant an accounting record.

Requests the gateway answers itself (``GET /v1/models``, ``GET /me``) count against the
key's requests per minute, and the recorder's queue drops fairly between teams: a flood of
refusals and model listings from one key, while another team's real requests run, leaves
every one of the victim's records in the store.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import httpx
import pytest
from tests.e2e.conftest import StartSim, add_key, model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow

ORGS = [
    {"name": "test-org", "share": 0.5, "teams": ["t"]},
    {"name": "victim-org", "share": 0.5, "teams": ["v"]},
]
FLOOD_THREADS = 4
FLOOD_ROUNDS = 100  # per thread, three requests a round


def flood(url: str, key: str, seen: list[tuple[str, int, str]]) -> None:
    """Model listings, ``/me`` and refused bodies as ``key``: (path, status, error code)."""
    headers = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for _ in range(FLOOD_ROUNDS):
            for answer in (
                client.get("/v1/models"),
                client.get("/me"),
                client.post("/v1/chat/completions", content=b"{not json"),
            ):
                code = answer.json().get("error", {}).get("code", "") if answer.is_error else ""
                seen.append((answer.request.url.path, answer.status_code, code))


def accounting_records(gateway: GatewayProcess, result: str) -> float:
    metrics = httpx.get(gateway.admin_url + "/metrics", timeout=30).text
    for line in metrics.splitlines():
        if line.startswith("fairgate_accounting_records_total") and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_flood_of_refusals_and_listings_loses_none_of_another_teams_records(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path, [model("m", sim)], orgs=ORGS, accounting={"queue_capacity": 100}
    )
    attacker = add_key(config, "t", name="flood", limits=Limits(rpm=100))
    victim = add_key(config, "v", name="victim")
    seen: list[tuple[str, int, str]] = []
    served: list[str] = []
    with GatewayProcess(config) as gateway:
        threads = [
            threading.Thread(target=flood, args=(gateway.url, attacker, seen))
            for _ in range(FLOOD_THREADS)
        ]
        for thread in threads:
            thread.start()
        with httpx.Client(
            base_url=gateway.url, headers={"authorization": f"Bearer {victim}"}, timeout=30
        ) as client:
            while any(thread.is_alive() for thread in threads) and len(served) < 60:
                answer = client.post(
                    "/v1/chat/completions",
                    json={
                        "model": "m",
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 2,
                    },
                )
                assert answer.status_code == 200, answer.text
                served.append(answer.headers["x-request-id"])
        for thread in threads:
            thread.join()
        overflowed = accounting_records(gateway, "spilled") + accounting_records(gateway, "dropped")
    # The flood did fill the queue (records past it went to the journal, or were
    # dropped when it was full too), and the listings were metered.
    assert overflowed > 0
    assert ("/v1/models", 429, "rpm_limit_exceeded") in seen
    assert ("/me", 429, "rpm_limit_exceeded") in seen
    assert len(served) >= 5
    with sqlite3.connect(tmp_path / "fairgate.db") as db:
        stored = {
            row[0] for row in db.execute("SELECT request_id FROM usage_records WHERE team='v'")
        }
    assert set(served) <= stored, (
        f"{len(set(served) - stored)} of {len(served)} victim records lost"
    )
