"""A journal directory the gateway cannot use stops ``fairgate serve`` at start-up: one
clear line naming ``accounting.journal_path``, exit status 1, no traceback, and the
process gone at once after saying so (not seconds later).

Run as root, a directory without write permission would still be writable, so the
directory here cannot be created at all: its parent is a regular file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import model, write_config

pytestmark = [pytest.mark.timeout(180)]

# The time from the error line to the end of the process. Without ``gc.freeze`` the
# interpreter's last collections over the gateway's heap took 1.0-1.4 s on an idle
# 2-core machine (tens of seconds under load); with it, well under 0.3 s.
EXIT_BOUND = 1.0


def _serve(config: Path, *args: str) -> tuple[int, list[str], float]:
    """Run ``fairgate serve`` until it exits by itself: (status, stderr lines, seconds from
    the first ``fairgate serve:`` or ERROR line to the exit)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairgate", "serve", "-c", str(config), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=config.parent,
    )
    lines: list[str] = []
    said: list[float] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if not said and ("fairgate serve:" in line or " ERROR " in line):
                said.append(time.monotonic())
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout=150)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    ended = time.monotonic()
    reader.join(10)
    assert proc.stderr is not None
    proc.stderr.close()
    assert said, lines[-20:]
    return status, lines, ended - said[0]


def _unusable(tmp_path: Path, **sections: Any) -> Path:
    (tmp_path / "not-a-directory").write_text("a file\n")
    return write_config(
        tmp_path,
        [model("m", upstreams=[{"name": "r0", "url": "http://127.0.0.1:9"}])],
        accounting={"journal_path": "not-a-directory/journal"},
        **sections,
    )


def test_an_unusable_journal_directory_is_one_clear_line_and_a_prompt_exit(
    tmp_path: Path,
) -> None:
    status, lines, after = _serve(_unusable(tmp_path))
    assert status == 1, lines[-20:]
    errors = [line for line in lines if line.startswith("fairgate serve:")]
    assert len(errors) == 1, lines[-20:]
    assert "accounting.journal_path" in errors[0]
    assert str(tmp_path / "not-a-directory" / "journal") in errors[0]
    assert "Not a directory" in errors[0]
    assert not any("Traceback" in line for line in lines), lines[-20:]
    assert after <= EXIT_BOUND, f"exited {after:.2f} s after its error line"


@pytest.mark.redis
def test_with_workers_each_worker_says_so_in_one_line_and_serve_exits_1(
    tmp_path: Path, redis_state: dict[str, Any]
) -> None:
    status, lines, _ = _serve(_unusable(tmp_path, state=redis_state), "--workers", "2")
    assert status == 1, lines[-20:]
    errors = [line for line in lines if " ERROR " in line]
    assert errors, lines[-20:]
    assert all("accounting.journal_path" in line for line in errors), errors
    assert not any("Traceback" in line for line in lines), lines[-20:]
