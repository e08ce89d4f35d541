"""Team-name squatting, attacked with real processes: the CLI, the gateway, its admin API.

An org admin of etabA takes the free team name ``physics`` through the admin API
and makes a key in it. The operator, unaware, later declares ``physics`` under
etabB in the configuration. The gateway must not start (exit status 1, a message
naming both organisations) rather than move etabA's team, keys and role bindings
into etabB; the store is left as it was, and the old configuration still starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import write_config

from fairgate.server.process import GatewayProcess

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-this-test-only"
ORGS: list[dict[str, Any]] = [
    {"name": "test-org", "share": 0.2, "teams": ["t"]},
    {"name": "etabA", "share": 0.4, "teams": ["a1"]},
    {"name": "etabB", "share": 0.4, "teams": ["b1"]},
]
UNREACHABLE = [
    {"name": "m", "engine": "vllm", "upstreams": [{"name": "r0", "url": "http://127.0.0.1:9"}]}
]


def fairgate(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fairgate", *args, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def declare(config: Path, team: str, org: str) -> None:
    """The operator's edit: ``team`` added to ``org``'s teams in the configuration file."""
    document = json.loads(config.read_text())
    for entry in document["orgs"]:
        if entry["name"] == org:
            entry["teams"].append(team)
    config.write_text(json.dumps(document))


def team_of(gateway: GatewayProcess, name: str, token: str) -> httpx.Response:
    return httpx.get(
        f"{gateway.admin_url}/admin/teams/{name}",
        headers={"authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_a_config_declaring_a_squatted_team_name_stops_the_start_and_moves_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "master.key").write_text(MASTER + "\n")
    config = write_config(tmp_path, UNREACHABLE, orgs=ORGS, master_key_file="master.key")
    assert fairgate(config, "users", "create", "olga", "--org", "etabA").returncode == 0
    assert fairgate(config, "users", "grant", "olga", "org_admin", "--org", "etabA").returncode == 0
    made = fairgate(config, "admin-tokens", "create", "--user", "olga", "--json")
    assert made.returncode == 0, made.stderr
    olga = {"authorization": f"Bearer {json.loads(made.stdout)[0]['secret']}"}

    with GatewayProcess(config) as gateway:
        squat = httpx.post(
            gateway.admin_url + "/admin/teams",
            headers=olga,
            json={"org": "etabA", "name": "physics"},
            timeout=30,
        )
        assert squat.status_code == 201, squat.text
        key = httpx.post(
            gateway.admin_url + "/admin/keys", headers=olga, json={"team": "physics"}, timeout=30
        )
        assert key.status_code == 201, key.text
    original = config.read_text()

    declare(config, "physics", "etabB")
    started = subprocess.run(
        [sys.executable, "-m", "fairgate", "serve", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert started.returncode == 1, started.stderr
    assert READY not in started.stdout
    reason = started.stderr
    assert "'physics'" in reason and "'etabA'" in reason and "'etabB'" in reason, reason
    assert "another name" in reason and "Traceback" not in reason
    assert MASTER not in reason

    listed = fairgate(config, "teams", "list", "--json")  # every command syncs first
    assert listed.returncode == 1 and "'etabB'" in listed.stderr

    config.write_text(original)
    with GatewayProcess(config) as gateway:
        team = team_of(gateway, "physics", MASTER)
        assert team.status_code == 200 and team.json()["org"] == "etabA"
        assert team_of(gateway, "physics", olga["authorization"][7:]).status_code == 200
        keys = httpx.get(
            gateway.admin_url + "/admin/keys", headers=olga, params={"team": "physics"}, timeout=30
        ).json()["data"]
        assert [(k["id"], k["org"]) for k in keys] == [(key.json()["id"], "etabA")]


READY = "fairgate listening on"
