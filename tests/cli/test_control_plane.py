"""``fairgate control-plane`` refuses a configuration without a control plane to run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_configuration_without_control_plane_exits_2_naming_the_section() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIRGATE_")}
    result = subprocess.run(
        [sys.executable, "-m", "fairgate", "control-plane", "-c", str(EXAMPLES / "gateway.yaml")],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "the configuration has no control_plane: section" in result.stderr
    assert result.stdout == ""  # nothing listened
