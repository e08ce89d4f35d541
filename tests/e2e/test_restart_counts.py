"""A restart does not reset the day: the memory back end's counters survive a kill -9.

A real gateway on the memory back end, a key with RPD=6 and one with RPM=5: each
uses part of its allowance, a snapshot reaches the store, the gateway is killed
with SIGKILL and started again on the same store. Only what was left is served.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import httpx
import orjson
import pytest
from tests.e2e.conftest import AUTH, StartSim, add_key, model, write_config
from tests.e2e.robust_wire import until

from fairgate.server.process import GatewayProcess
from fairgate.tenancy.limits import Limits

pytestmark = pytest.mark.slow

RPD, RPD_USED = 6, 4
RPM, RPM_USED = 5, 3


def chat(gateway: GatewayProcess, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        headers=headers,
        timeout=30,
    )


def served_until_refused(gateway: GatewayProcess, headers: dict[str, str]) -> tuple[int, str]:
    """How many requests pass before the first refusal, and that refusal's code."""
    served = 0
    while (answer := chat(gateway, headers)).status_code == 200:
        served += 1
        assert served <= 10, "never refused"
    assert answer.status_code == 429, answer.text
    return served, answer.json()["error"]["code"]


def saved(store: Path) -> list[tuple[str, dict[str, object]]]:
    """(kind, data) of every counter in the store's last snapshot."""
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT kind, data FROM counter_snapshots").fetchall()
    return [(kind, orjson.loads(data)) for kind, data in rows]


def holds(store: Path, rpd_used: int, rpm_used: int) -> bool:
    """Whether the snapshot has a day counter at ``rpd_used`` and a minute window at
    ``rpm_used`` (whatever the counters' keys)."""
    counters = saved(store)
    periods = {data["value"] for kind, data in counters if kind == "period"}
    windows = {
        sum(int(w) for _, w in data["buckets"])  # type: ignore[attr-defined]
        for kind, data in counters
        if kind == "window"
    }
    return rpd_used in periods and rpm_used in windows


def test_a_killed_gateway_restarts_with_the_days_and_the_minutes_counts(
    tmp_path: Path, start_sim: StartSim
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path, [model("m", sim)], state={"backend": "memory", "snapshot_interval": "1s"}
    )
    daily = {"authorization": f"Bearer {add_key(config, 't', limits=Limits(rpd=RPD))}"}
    minute = {"authorization": f"Bearer {add_key(config, 't', limits=Limits(rpm=RPM))}"}
    store = tmp_path / "fairgate.db"

    first = GatewayProcess(config).start()
    try:
        assert [chat(first, daily).status_code for _ in range(RPD_USED)] == [200] * RPD_USED
        assert [chat(first, minute).status_code for _ in range(RPM_USED)] == [200] * RPM_USED
        until(lambda: holds(store, RPD_USED, RPM_USED), 30, "a snapshot with these counts")
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)  # no graceful stop: no last snapshot
        assert first.wait(30) == -signal.SIGKILL
    finally:
        first.stop()

    with GatewayProcess(config) as second:
        assert served_until_refused(second, daily) == (RPD - RPD_USED, "rpd_limit_exceeded")
        assert served_until_refused(second, minute) == (RPM - RPM_USED, "rpm_limit_exceeded")
        assert chat(second, AUTH).status_code == 200  # an unlimited key is not affected


def test_a_graceful_stop_saves_the_counts_it_has_not_snapshotted_yet(
    tmp_path: Path, start_sim: StartSim
) -> None:
    """No periodic snapshot runs within the test (an hour's interval): only the one taken at
    SIGTERM carries the counts to the next start."""
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path, [model("m", sim)], state={"backend": "memory", "snapshot_interval": "1h"}
    )
    daily = {"authorization": f"Bearer {add_key(config, 't', limits=Limits(rpd=RPD))}"}
    store = tmp_path / "fairgate.db"
    first = GatewayProcess(config).start()
    try:
        assert [chat(first, daily).status_code for _ in range(RPD_USED)] == [200] * RPD_USED
        assert saved(store) == []
    finally:
        assert first.stop() == 0  # SIGTERM: a graceful stop
    with GatewayProcess(config) as second:
        assert served_until_refused(second, daily) == (RPD - RPD_USED, "rpd_limit_exceeded")
