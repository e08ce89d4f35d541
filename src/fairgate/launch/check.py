"""Everything wrong with a profile on this node, before anything is launched."""

from __future__ import annotations

import errno
import shutil
import socket
from collections.abc import Callable, Collection

from fairgate.inventory.fit import IDLE_USED_MIB, free_gpus
from fairgate.inventory.model import Inventory
from fairgate.launch.command import ProfileError, check_args
from fairgate.launch.profile import Profile

__all__ = ["check", "port_is_free"]

EXECUTABLE = {"vllm": "vllm", "llama-server": "llama-server"}


def port_is_free(host: str, port: int) -> bool:
    """Whether `host:port` can be bound now (the engine binds it a moment later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check(
    profile: Profile,
    inventory: Inventory,
    *,
    claimed: Collection[int] = (),
    idle_used_mib: int = IDLE_USED_MIB,
    which: Callable[[str], str | None] = shutil.which,
    port_free: Callable[[str, int], bool] = port_is_free,
) -> list[str]:
    """Every problem found (empty when the profile can launch), in words for the log.

    `claimed` are the GPUs this node's other replicas hold. All checks run, so one
    answer names everything an operator has to fix.
    """
    problems: list[str] = []
    try:
        check_args(profile)
    except ProfileError as exc:
        problems.append(str(exc))
    if not 0 < profile.port < 65536:
        problems.append(f"port {profile.port} is not a TCP port")
    elif not port_free(profile.host, profile.port):
        problems.append(f"port {profile.port} on {profile.host} is in use")
    if profile.engine in EXECUTABLE and which(EXECUTABLE[profile.engine]) is None:
        problems.append(f"{EXECUTABLE[profile.engine]} is not installed on this node (PATH)")
    local = profile.local_model_path()
    if local is not None and not local.exists():
        problems.append(f"the model path {profile.model} does not exist on this node")
    problems.extend(_gpu_problems(profile, inventory, claimed, idle_used_mib))
    return problems


def _gpu_problems(
    profile: Profile, inventory: Inventory, claimed: Collection[int], idle_used_mib: int
) -> list[str]:
    if profile.tensor_parallel_size < 1:
        return [f"tensor_parallel_size {profile.tensor_parallel_size} is below 1"]
    if not profile.gpus:
        if profile.engine == "sim":
            return []
        return [f"{profile.engine} needs at least one GPU; the profile gives none"]
    problems: list[str] = []
    if len(set(profile.gpus)) != len(profile.gpus):
        problems.append(f"GPUs {list(profile.gpus)} repeat")
    if len(profile.gpus) % profile.tensor_parallel_size:
        problems.append(
            f"{len(profile.gpus)} GPUs is not a multiple of tensor_parallel_size "
            f"{profile.tensor_parallel_size}"
        )
    by_index = {gpu.index: gpu for gpu in inventory.gpus}
    missing = [g for g in profile.gpus if g not in by_index]
    if missing:
        problems.append(f"GPUs {missing} do not exist (the node has {len(by_index)})")
    free = {gpu.index for gpu in free_gpus(inventory, claimed, idle_used_mib=idle_used_mib)}
    for index in profile.gpus:
        if index in by_index and index not in free:
            gpu = by_index[index]
            why = (
                "held by another replica"
                if index in claimed
                else f"{gpu.processes} compute processes"
                if gpu.processes
                else f"{gpu.memory_used_mib} MiB in use"
            )
            problems.append(f"GPU {index} is not free ({why})")
    if profile.tensor_parallel_size > 1:
        domains = {by_index[g].nvlink_domain for g in profile.gpus if g in by_index}
        if len(domains) > 1:
            problems.append(
                f"a tensor-parallel group of {profile.tensor_parallel_size} spans "
                f"{len(domains)} NVLink domains (GPUs {list(profile.gpus)})"
            )
    return problems
