"""benchmarks/report.py: a missed target points at the profile that explains it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import report


def test_a_configuration_that_missed_a_target_names_its_leading_stages() -> None:
    checks = {
        "gateway full/memory": {
            "throughput_ratio": {"value": 0.61, "limit": 0.8, "met": False},
        },
        "gateway full/redis": {
            "throughput_ratio": {"value": 0.75, "limit": 0.7, "met": True},
        },
    }
    profile = {
        "server_cpu_us_per_request": 200.0,
        "by_stage": {"limit": 0.2, "server": 0.3, "relay": 0.1, "other": 0.35, "unmapped": 0.05},
    }
    profiles = {"gateway full/memory": profile, "gateway full/redis": profile}

    table = report.verdict_table(checks, profiles)

    lines = table.splitlines()
    memory = lines.index("  gateway full/memory")
    assert "MISSED" in lines[memory + 1]
    assert lines[memory + 2].split(":", 1)[1].strip() == (
        "server 30% (60 µs), limit 20% (40 µs), relay 10% (20 µs)"
    )
    assert "first stages" not in table.split("gateway full/redis")[1]  # all met: no hint
    assert "first stages" not in report.verdict_table(checks)  # no profile: as before
    assert lines[-1] == report.NEXT_STEP  # a target missed: where its next step is


def test_every_target_met_points_at_no_next_step() -> None:
    checks = {
        "gateway full/memory": {"throughput_ratio": {"value": 0.9, "limit": 0.8, "met": True}}
    }

    assert report.NEXT_STEP not in report.verdict_table(checks)


def test_the_next_step_it_points_at_is_written() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"

    assert "## What the targets need" in docs.read_text(encoding="utf-8")
    assert '"What the targets need"' in report.NEXT_STEP


def _streamed(complete: int, rounds: int) -> dict[str, object]:
    return {
        "proxy": "gateway full/memory",
        "path": "full",
        "state": "memory",
        "streams": 1000,
        "rounds": rounds,
        "complete": complete,
        "freed": True,
    }


def test_streams_complete_counts_every_round_of_the_phase() -> None:
    def met(complete: int, rounds: int) -> bool:
        run = {"streaming": [_streamed(complete, rounds)]}
        verdict: bool = report.verdict(run)["streaming (full/memory)"]["streams_complete"]["met"]
        return verdict

    assert met(3000, 3)
    assert not met(1000, 3)  # one round's worth of 3: two rounds lost streams
    assert not met(2999, 3)
    assert met(1000, 1)
