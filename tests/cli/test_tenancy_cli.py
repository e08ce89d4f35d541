"""The operator CLI as an operator runs it: real processes against a temporary SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from fairgate.auth.secrets import looks_like_key, sha256


def fairgate(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "fairgate", *args, "-c", str(config)],
        env={**clean, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        textwrap.dedent(
            """
            store: {url: "sqlite:///state/fairgate.db"}
            orgs:
              - {name: etabA, share: 0.6, teams: [lab-nlp]}
              - {name: etabB, share: 0.4, teams: [lab-chem]}
            models:
              - name: llama-8b
                aliases: [llama8b]
                upstreams: [{name: u, url: "http://127.0.0.1:9"}]
            """
        )
    )
    (tmp_path / "state").mkdir()
    return path


def test_db_upgrade_creates_the_store_beside_the_config_and_is_idempotent(
    config: Path, tmp_path: Path
) -> None:
    first = fairgate(config, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert "upgraded from empty to revision" in first.stdout
    assert (tmp_path / "state" / "fairgate.db").is_file()
    second = fairgate(config, "db", "upgrade")
    assert second.returncode == 0 and "nothing to do" in second.stdout


def test_a_key_is_created_printed_once_listed_rotated_and_revoked(config: Path) -> None:
    created = fairgate(
        config,
        "keys",
        "create",
        "--team",
        "lab-nlp",
        "--rpm",
        "60",
        "--models",
        "llama8b",
        "--expires",
        "30d",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    key = orjson.loads(created.stdout)[0]
    assert looks_like_key(key["secret"])
    assert (key["team"], key["org"], key["rpm"], key["models"]) == (
        "lab-nlp",
        "etabA",
        60,
        ["llama8b"],
    )

    listed = fairgate(config, "keys", "list", "--json")
    assert listed.returncode == 0
    assert key["secret"] not in listed.stdout and sha256(key["secret"]).hex() not in listed.stdout
    assert [k["id"] for k in orjson.loads(listed.stdout)] == [key["id"]]

    table = fairgate(config, "keys", "list")
    assert key["id"] in table.stdout and key["prefix"] in table.stdout
    assert key["secret"] not in table.stdout

    rotated = fairgate(config, "keys", "rotate", key["id"], "--grace", "24h")
    assert rotated.returncode == 0, rotated.stderr
    assert "shown once" in rotated.stdout
    new_secret = rotated.stdout.split("secret: ")[1].split()[0]
    assert looks_like_key(new_secret) and new_secret != key["secret"]

    revoked = fairgate(config, "keys", "revoke", key["id"], "--json")
    assert revoked.returncode == 0
    assert orjson.loads(revoked.stdout)[0]["revoked_at"] is not None


def test_the_table_form_prints_the_secret_once_and_says_so(config: Path) -> None:
    created = fairgate(config, "keys", "create", "--team", "lab-chem")
    assert created.returncode == 0, created.stderr
    assert created.stdout.count("fg-") >= 2  # the prefix in the table, the secret below it
    assert "secret: fg-" in created.stdout and "shown once" in created.stdout


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("keys", "create", "--team", "nope"), "no team 'nope'"),
        (("keys", "create", "--team", "lab-nlp", "--models", "gpt-5"), "unknown model 'gpt-5'"),
        (("keys", "create", "--team", "lab-nlp", "--expires", "soon"), "--expires: not a duration"),
        (("keys", "revoke", "01NOSUCHKEY"), "no key '01NOSUCHKEY'"),
        (("users", "grant", "ghost", "viewer", "--org", "etabA"), "no such user"),
        (("users", "enable", "ghost"), "no such user"),
        (("users", "grant", "x", "org_admin"), "org_admin is bound on org, not on root"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_status_1(
    config: Path, args: tuple[str, ...], reason: str
) -> None:
    result = fairgate(config, *args)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"fairgate: {reason}")


def test_teams_projects_users_roles_and_admin_tokens(config: Path) -> None:
    assert fairgate(config, "teams", "create", "lab-bio", "--org", "etabA").returncode == 0
    teams = orjson.loads(fairgate(config, "teams", "list", "--org", "etabA", "--json").stdout)
    assert {t["name"] for t in teams} == {"lab-nlp", "lab-bio"}
    assert fairgate(config, "projects", "create", "p1", "--team", "lab-bio").returncode == 0
    projects = orjson.loads(fairgate(config, "projects", "list", "--json").stdout)
    assert [(p["team"], p["name"]) for p in projects] == [("lab-bio", "p1")]
    assert fairgate(config, "users", "create", "olga", "--org", "etabA").returncode == 0
    granted = fairgate(config, "users", "grant", "olga", "org_admin", "--org", "etabA")
    assert granted.returncode == 0, granted.stderr
    token = fairgate(config, "admin-tokens", "create", "--user", "olga", "--json")
    assert orjson.loads(token.stdout)[0]["secret"].startswith("fga-")
    roles = orjson.loads(fairgate(config, "users", "roles", "olga", "--json").stdout)
    assert [(r["role"], r["scope"]) for r in roles] == [("org_admin", "etabA")]
    removed = fairgate(config, "users", "revoke-role", "olga", "org_admin", "--org", "etabA")
    assert removed.returncode == 0
    assert orjson.loads(fairgate(config, "users", "roles", "olga", "--json").stdout) == []


def test_teams_take_per_key_limits_totals_and_keys_per_member(config: Path) -> None:
    created = fairgate(
        config, "teams", "create", "lab-bio", "--org", "etabA", "--rpm", "60",
        "--total-rpm", "600", "--max-keys-per-member", "3", "--json",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    team = orjson.loads(created.stdout)[0]
    assert (team["rpm"], team["total_rpm"], team["max_keys_per_member"]) == (60, 600, 3)
    changed = fairgate(config, "teams", "update", "lab-bio", "--total-tpm", "9000", "--json")
    assert changed.returncode == 0, changed.stderr
    team = orjson.loads(changed.stdout)[0]
    assert (team["rpm"], team["total_rpm"], team["total_tpm"]) == (60, 600, 9000)
    assert team["max_keys_per_member"] == 3
    above = fairgate(config, "keys", "create", "--team", "lab-bio", "--rpm", "61")
    assert above.returncode == 1
    assert "rpm 61 is above team 'lab-bio''s limit of 60 per key" in above.stderr
    # a value out of range is one line of reason, never a traceback, and creates nothing
    keys_before = fairgate(config, "keys", "list", "--team", "lab-bio", "--json").stdout
    for command in (
        ("keys", "create", "--team", "lab-bio", "--tpm", "2000000000"),
        ("teams", "create", "lab-astro", "--org", "etabA", "--total-rpm", "2000000000"),
    ):
        refused = fairgate(config, *command)
        assert refused.returncode == 1, refused.stderr
        assert "must be an integer from 1 to 1000000000" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert fairgate(config, "keys", "list", "--team", "lab-bio", "--json").stdout == keys_before
    teams = orjson.loads(fairgate(config, "teams", "list", "--json").stdout)
    assert "lab-astro" not in [t["name"] for t in teams]


def test_a_user_disabled_then_enabled_comes_back_without_the_tokens_revoked_at_disable(
    config: Path,
) -> None:
    assert fairgate(config, "users", "create", "olga", "--org", "etabA").returncode == 0
    token = orjson.loads(
        fairgate(config, "admin-tokens", "create", "--user", "olga", "--json").stdout
    )[0]
    disabled = fairgate(config, "users", "disable", "olga", "--json")
    assert disabled.returncode == 0, disabled.stderr
    assert orjson.loads(disabled.stdout)[0]["disabled_at"] is not None
    enabled = fairgate(config, "users", "enable", "olga", "--json")
    assert enabled.returncode == 0, enabled.stderr
    assert orjson.loads(enabled.stdout)[0]["disabled_at"] is None
    tokens = orjson.loads(fairgate(config, "admin-tokens", "list", "--json").stdout)
    assert [(t["id"], t["revoked_at"] is not None) for t in tokens] == [(token["id"], True)]
