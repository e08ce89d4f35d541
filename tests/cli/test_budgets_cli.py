"""``fairgate budgets`` as an operator runs it: real processes against a temporary SQLite store."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest


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


def ok_json(config: Path, *args: str) -> Any:
    done = fairgate(config, *args, "--json")
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        textwrap.dedent(
            """
            store: {url: "sqlite:///fairgate.db"}
            orgs:
              - {name: etabA, share: 0.6, teams: [lab-nlp]}
            models:
              - name: llama-8b
                upstreams: [{name: u, url: "http://127.0.0.1:9"}]
            """
        )
    )
    return path


def test_set_twice_list_increase_and_delete(config: Path) -> None:
    first = ok_json(
        config, "budgets", "set", "--scope", "team:lab-nlp", "--period", "month", "--max", "100",
        "--soft", "80",
    )[0]  # fmt: skip
    assert (first["scope"], first["max"], first["soft"], first["max_micro"]) == (
        "team:lab-nlp",
        "100",
        "80",
        100_000_000,
    )
    again = ok_json(
        config, "budgets", "set", "--scope", "team:lab-nlp", "--period", "month", "--max", "0.25"
    )[0]
    assert again["id"] == first["id"] and again["max_micro"] == 250_000
    ok_json(
        config, "budgets", "set", "--scope", "org:etabA", "--period", "day", "--max", "5",
        "--model", "llama-8b",
    )  # fmt: skip
    listed = ok_json(config, "budgets", "list")
    assert {(b["scope"], b["model"]) for b in listed} == {
        ("team:lab-nlp", None),
        ("org:etabA", "llama-8b"),
    }
    raised = ok_json(config, "budgets", "increase", first["id"], "--by", "1.5", "--for", "7d")[0]
    assert raised["effective_max"] == "1.75" and len(raised["increases"]) == 1
    end = (datetime.now(UTC) + timedelta(days=30)).strftime("%Y-%m-%dT%H:%MZ")
    until = ok_json(config, "budgets", "increase", first["id"], "--by", "1", "--until", end)[0]
    assert until["effective_max"] == "2.75"
    assert until["increases"][-1]["expires_at"] == end.replace("Z", ":00Z")
    table = fairgate(config, "budgets", "list", "--scope", "team:lab-nlp")
    assert table.returncode == 0 and first["id"] in table.stdout and "2.75" in table.stdout
    deleted = ok_json(config, "budgets", "delete", first["id"])[0]
    assert deleted["id"] == first["id"]
    assert [b["scope"] for b in ok_json(config, "budgets", "list")] == ["org:etabA"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("set", "--scope", "lab-nlp", "--period", "day", "--max", "1"), "invalid scope"),
        (("set", "--scope", "team:lab-x", "--period", "day", "--max", "1"), "no team"),
        (("set", "--scope", "team:lab-nlp", "--period", "day", "--max", "lots"), "--max"),
        (("set", "--scope", "team:lab-nlp", "--period", "year", "--max", "1"), "invalid period"),
        (("delete", "01JC0000000000000000000000"), "no budget"),
        (("increase", "01JC0000000000000000000000", "--by", "1"), "exactly one of"),
        (("increase", "X", "--by", "1", "--until", "2099-01-01T00:00Z"), "within a year"),
        (("increase", "X", "--by", "1", "--until", "soon"), "invalid moment"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_1(
    config: Path, args: tuple[str, ...], reason: str
) -> None:
    done = fairgate(config, "budgets", *args)
    assert done.returncode == 1, done.stdout
    assert reason in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
