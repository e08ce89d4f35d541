"""``fairgate allowlists`` as an operator runs it: real processes on a temporary SQLite store."""

from __future__ import annotations

from pathlib import Path

import orjson

from cli.test_tenancy_cli import config, fairgate

__all__ = ["config"]


def test_set_list_and_clear_a_list_of_each_kind(config: Path) -> None:
    created = fairgate(config, "keys", "create", "--team", "lab-nlp", "--json")
    assert created.returncode == 0, created.stderr
    key_id = orjson.loads(created.stdout)[0]["id"]
    said = []
    for scope, cidrs in [
        ("org:etabA", ["10.0.0.0/8"]),
        ("team:lab-nlp", ["10.1.0.0/16", "192.0.2.7"]),
        (f"key:{key_id}", ["10.1.2.3"]),
    ]:
        done = fairgate(
            config,
            "allowlists",
            "set",
            "--scope",
            scope,
            *(arg for cidr in cidrs for arg in ("--cidr", cidr)),
        )
        assert done.returncode == 0, done.stderr
        said.append(done.stdout.strip())
    assert said[1] == "team:lab-nlp allows 10.1.0.0/16, 192.0.2.7/32"  # as stored
    listed = fairgate(config, "allowlists", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {(r["kind"], r["name"]): r for r in orjson.loads(listed.stdout)}
    assert {k: r["cidrs"] for k, r in rows.items()} == {
        ("org", "etabA"): ["10.0.0.0/8"],
        ("team", "lab-nlp"): ["10.1.0.0/16", "192.0.2.7/32"],
        ("key", key_id): ["10.1.2.3/32"],
    }
    assert rows[("key", key_id)]["team"] == "lab-nlp"
    assert rows[("key", key_id)]["updated_by"].startswith("operator:")
    table = fairgate(config, "allowlists", "list", "--scope", "team:lab-nlp")
    assert "10.1.0.0/16" in table.stdout and "10.0.0.0/8" not in table.stdout
    cleared = fairgate(config, "allowlists", "clear", "--scope", "team:lab-nlp")
    assert cleared.returncode == 0 and "team:lab-nlp has no IP allowlist" in cleared.stdout
    listed = fairgate(config, "allowlists", "list", "--json")
    assert {(r["kind"], r["name"]) for r in orjson.loads(listed.stdout)} == {
        ("org", "etabA"),
        ("key", key_id),
    }


def test_a_malformed_network_or_scope_exits_1_with_the_reason(config: Path) -> None:
    bits = fairgate(
        config,
        "allowlists",
        "set",
        "--scope",
        "team:lab-nlp",
        "--cidr",
        "10.0.0.0/8",
        "--cidr",
        "10.1.0.5/16",
    )
    assert bits.returncode == 1
    assert "cidrs[1]: '10.1.0.5/16' has host bits set" in bits.stderr
    assert "10.1.0.0/16" in bits.stderr
    for args in (
        ["set", "--scope", "project:x", "--cidr", "10.0.0.0/8"],
        ["set", "--scope", "team:", "--cidr", "10.0.0.0/8"],
        ["set", "--scope", "team:lab-nlp"],
    ):
        done = fairgate(config, "allowlists", *args)
        assert done.returncode != 0, args
    unknown = fairgate(config, "allowlists", "set", "--scope", "team:nope", "--cidr", "10.0.0.0/8")
    assert unknown.returncode == 1 and "no team 'nope'" in unknown.stderr
    listed = fairgate(config, "allowlists", "list", "--json")
    assert orjson.loads(listed.stdout) == []
