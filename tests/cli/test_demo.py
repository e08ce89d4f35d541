"""`fairgate demo --once`: engines, gateway, a sample call that returns an answer, clean exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_makes_a_sample_call_and_exits(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fairgate", "demo", "--once", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "sample call: POST http://127.0.0.1:" in result.stdout
    assert "'completion_tokens': 12" in result.stdout
    assert (tmp_path / "demo" / "gateway.yaml").is_file()
    # The printed config is a valid gateway configuration.
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairgate",
            "check-config",
            "-c",
            str(tmp_path / "demo" / "gateway.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stderr
