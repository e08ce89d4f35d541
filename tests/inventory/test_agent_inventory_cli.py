"""`fairgate agent inventory` as an operator runs it, as a process.

NVML cannot load on a machine without NVIDIA's driver, so there the command falls back
to `nvidia-smi` with a warning; the tests put an `nvidia-smi` on PATH that prints a
node's recorded outputs (tests/inventory/recorded/), and one test runs the command
against whatever this machine really has.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fairgate.inventory import Inventory
from fairgate.inventory.nvml import NvmlUnavailable, inventory_from_nvml

RECORDED = Path(__file__).parent / "recorded"

FAKE_SMI = """#!{python}
import sys
from pathlib import Path
node = Path({node!r})
args = sys.argv[1:]
if {fail!r}:
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
if not args:
    name = "nvidia-smi.txt"
elif args[0] == "topo":
    name = "topo-m.txt"
elif args[0].startswith("--query-gpu="):
    name = "query-gpu.csv"
elif args[0].startswith("--query-compute-apps="):
    name = "compute-apps.csv"
else:
    sys.exit(2)
sys.stdout.write((node / name).read_text())
"""


def _nvml_loads() -> bool:
    try:
        inventory_from_nvml()
    except NvmlUnavailable:
        return False
    return True


needs_no_nvml = pytest.mark.skipif(
    _nvml_loads(), reason="NVML loads here, so the command never falls back to nvidia-smi"
)


def run_inventory(path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "fairgate", "agent", "inventory", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def fake_smi(tmp_path: Path, node: str, *, fail: bool = False) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(FAKE_SMI.format(python=sys.executable, node=str(RECORDED / node), fail=fail))
    script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


@needs_no_nvml
def test_falls_back_to_nvidia_smi_with_a_warning_and_prints_json(tmp_path: Path) -> None:
    done = run_inventory(fake_smi(tmp_path, "hgx-h100"), "--json")
    assert done.returncode == 0, done.stderr
    assert "WARNING" in done.stderr and "NVML unavailable" in done.stderr
    inv = Inventory.from_json(done.stdout)
    assert inv.source == "nvidia-smi" and len(inv.gpus) == 8
    assert inv.gpus[5].processes == 1
    # The JSON is what `--inventory FILE` reads back: a recorded inventory.
    assert Inventory.from_json(json.dumps(json.loads(done.stdout))) == inv


@needs_no_nvml
def test_table_names_gpus_and_domains(tmp_path: Path) -> None:
    done = run_inventory(fake_smi(tmp_path, "pcie-a6000-pairs"))
    assert done.returncode == 0, done.stderr
    assert "NVIDIA RTX A6000" in done.stdout and "CUDA 12.2" in done.stdout
    assert "NVLink domains: 0: GPUs 0, 1; 1: GPUs 2, 3" in done.stdout


@needs_no_nvml
def test_a_failing_nvidia_smi_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = run_inventory(fake_smi(tmp_path, "hgx-h100", fail=True), "--json")
    assert done.returncode == 1
    assert (
        "exited 9" in done.stderr and "couldn't communicate with the NVIDIA driver" in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_this_machine_for_real() -> None:
    # Whatever this machine has: GPUs through NVML or nvidia-smi, or none at all.
    done = run_inventory(os.environ.get("PATH", ""), "--json")
    assert done.returncode == 0, done.stderr
    inv = Inventory.from_json(done.stdout)
    if _nvml_loads() or shutil.which("nvidia-smi"):
        assert inv.gpus, "this machine has NVIDIA's tools but the inventory is empty"
    else:
        assert inv == Inventory(source="none")
