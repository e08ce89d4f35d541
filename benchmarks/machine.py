"""The machine and software a run measured, printed with every result so it can be reproduced.

Figures mean little without this: the CPU model and core count, the load when the run
started and ended (other work on the same cores moves p99 most), the Python version and
the versions of every layer measured.
"""

from __future__ import annotations

import os
import platform
import resource
import shlex
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["LIBRARIES", "describe", "load_average", "raise_fd_limit"]

LIBRARIES = ("fairgate", "uvicorn", "uvloop", "httptools", "aiohttp", "httpx", "granian", "orjson")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def describe(argv: list[str]) -> dict[str, Any]:
    """Everything about this run's machine and command, as plain JSON values."""
    return {
        "command": shlex.join(["python", "benchmarks/overhead.py", *argv]),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": {name: _version(name) for name in LIBRARIES},
        "load_at_start": load_average(),
        "fd_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "executable": Path(sys.executable).name,
    }


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE toward ``wanted`` (capped by the hard limit).

    Child processes (the gateway, the sim) inherit it, which is what 1,000 concurrent
    streams need: each holds a client socket and an upstream socket in the gateway.
    Returns the soft limit now in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
