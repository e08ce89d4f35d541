"""``fairgate export`` as an operator runs it: a real process over a temporary SQLite store."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from fairgate.accounting import StoreUsageWriter, UsageRecord
from fairgate.store import Store, upgrade

DAY = datetime(2025, 10, 1, tzinfo=UTC)


def fairgate(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "fairgate", "export", *args, "-c", str(config)],
        env={**clean, "COLUMNS": "120"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def make_records() -> list[UsageRecord]:
    places = [("etabA", "lab-nlp", ("eval",)), ("etabA", "lab-bio", ()), ("etabB", "lab-chem", ())]
    return [
        UsageRecord(
            request_id=f"r{day}-{i}",
            at=DAY + timedelta(days=day, hours=i),
            key_id=f"k{i}",
            org=org,
            team=team,
            tags=tags,
            model="llama-8b",
            prompt_tokens=1000 + i,
            completion_tokens=100,
            cached_tokens=i,
            cost_micro=250_000 * (i + 1),
            estimated=i == 2,
        )
        for day in (0, 1, 20)
        for i, (org, team, tags) in enumerate(places)
    ]


async def seed(url: str, records: list[UsageRecord]) -> None:
    store = Store(url)
    await store.connect()
    try:
        await upgrade(store)
        assert await StoreUsageWriter(store).write(records) == len(records)
    finally:
        await store.close()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        textwrap.dedent(
            """
            store: {url: "sqlite:///fairgate.db"}
            orgs:
              - {name: etabA, share: 0.6, teams: [lab-nlp, lab-bio]}
              - {name: etabB, share: 0.4, teams: [lab-chem]}
            models:
              - name: llama-8b
                upstreams: [{name: u, url: "http://127.0.0.1:9"}]
            """
        )
    )
    asyncio.run(seed(f"sqlite:///{tmp_path}/fairgate.db", make_records()))
    return path


def test_parsable2_of_two_days_byte_for_byte(config: Path) -> None:
    done = fairgate(
        config,
        "--from",
        "2025-10-01",
        "--to",
        "2025-10-03",
        "--group-by",
        "org,team",
        "--format",
        "parsable2",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "org|team|requests|prompt_tokens|completion_tokens|cached_tokens|gpu_hours|"
        "estimated_requests\n"
        "etabA|lab-bio|2|2002|200|2|1.000000|0\n"
        "etabA|lab-nlp|2|2000|200|0|0.500000|0\n"
        "etabB|lab-chem|2|2004|200|4|1.500000|2\n"
    )
    assert done.stderr == ""


def test_a_long_period_shows_progress_on_stderr_and_the_same_totals_on_stdout(
    config: Path,
) -> None:
    records = make_records()
    done = fairgate(config, "--from", "2025-09-15", "--to", "2025-11-01", "--group-by", "tag")
    assert done.returncode == 0, done.stderr
    assert "reading 47 days" in done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.startswith("tag,requests,")
    rows = {line.split(",")[0]: line.split(",") for line in lines}
    assert set(rows) == {"", "eval"}
    assert sum(int(r[1]) for r in rows.values()) == len(records)
    assert (
        sum(Decimal(r[5]) for r in rows.values())
        == Decimal(sum(r.cost_micro for r in records)) / 1_000_000
    )


def test_json_holds_the_period_and_the_total(config: Path) -> None:
    done = fairgate(config, "--from", "2025-10-21", "--to", "2025-10-22", "--format", "json")
    assert done.returncode == 0, done.stderr
    body = orjson.loads(done.stdout)
    assert (body["from"], body["to"]) == ("2025-10-21T00:00:00Z", "2025-10-22T00:00:00Z")
    assert body["total"]["requests"] == 3 and body["total"]["gpu_hours"] == "1.500000"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--from", "2025-10-32", "--to", "2025-11-01"), "--from: expected a date"),
        (("--from", "2025-10-02", "--to", "2025-10-01"), "to must be after from"),
        (("--from", "2025-10-01", "--to", "2025-11-01", "--format", "xml"), "format: unknown"),
        (("--from", "2025-10-01", "--to", "2025-11-01", "--group-by", "colour"), "group_by"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_status_1(
    config: Path, args: tuple[str, ...], reason: str
) -> None:
    done = fairgate(config, *args)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fairgate: ") and reason in lines[0]
