"""The node's inventory: NVML first, `nvidia-smi` when NVML cannot be loaded, else none.

Falling back is logged as a warning naming NVML's reason, because the fallback
knows less (no NVSwitch link types: only the matrix's `NV<n>` cells) and costs four
processes. A node with neither (a machine that only runs the simulated engine) has
an empty inventory whose `source` is `none`; that is not an error.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable

from fairgate.inventory.model import Inventory
from fairgate.inventory.nvml import NvmlUnavailable, inventory_from_nvml
from fairgate.inventory.smi import inventory_from_smi

__all__ = ["ProbeError", "probe", "run_smi"]

log = logging.getLogger(__name__)

SMI_TIMEOUT = 20.0
"""Seconds one nvidia-smi command may take (a wedged driver can hang it)."""


class ProbeError(RuntimeError):
    """nvidia-smi exists but failed or printed what the parser refuses."""


def run_smi(argv: list[str]) -> str:
    """Run one nvidia-smi command; its stdout, or ProbeError with its stderr's tail."""
    try:
        done = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            argv, capture_output=True, text=True, timeout=SMI_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError(f"{' '.join(argv)}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ProbeError(f"{' '.join(argv)} exited {done.returncode}: {' / '.join(tail)}")
    return done.stdout


def probe(
    *,
    nvml: Callable[[], Inventory] = inventory_from_nvml,
    smi: Callable[[list[str]], str] = run_smi,
    which: Callable[[str], str | None] = shutil.which,
) -> Inventory:
    """What this node has now (see the module's docstring for the order)."""
    try:
        return nvml()
    except NvmlUnavailable as exc:
        reason = str(exc) or type(exc).__name__
    if which("nvidia-smi") is None:
        log.info("no NVIDIA GPU inventory: NVML unavailable (%s) and no nvidia-smi", reason)
        return Inventory(source="none")
    log.warning("NVML unavailable (%s): reading the inventory from nvidia-smi", reason)
    try:
        return inventory_from_smi(smi)
    except ValueError as exc:
        raise ProbeError(f"nvidia-smi's output: {exc}") from None
