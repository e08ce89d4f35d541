"""Whether a replica's GPUs fit on a node, which ones, and if not, why — in words.

A GPU is free when nothing the gateway placed holds it (`claimed`), no compute process
runs on it, and its measured used memory is below `idle_used_mib`: the inventory is
measured, so a GPU busy with a batch job outside the gateway (a Slurm job on the
same node) is not free even though the gateway placed nothing there. A
tensor-parallel group must sit inside one NVLink domain; the group is taken from the
domain with the fewest free GPUs that still fits it, so large domains stay whole for
large groups.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from fairgate.inventory.model import Gpu, Inventory

__all__ = ["IDLE_USED_MIB", "Fit", "NoFit", "fit", "free_gpus"]

IDLE_USED_MIB = 1024
"""Used memory below which a GPU without compute processes counts as idle (a driver's
own contexts and a display take a few hundred MiB)."""


@dataclass(frozen=True, slots=True)
class Fit:
    gpus: tuple[int, ...]
    """The GPU indices to give the replica (its CUDA_VISIBLE_DEVICES)."""


@dataclass(frozen=True, slots=True)
class NoFit:
    reason: str
    """Why not, naming the counts an operator can check (e.g. on `fairgate agent inventory`)."""


def free_gpus(
    inventory: Inventory, claimed: Collection[int] = (), *, idle_used_mib: int = IDLE_USED_MIB
) -> list[Gpu]:
    return [
        gpu
        for gpu in sorted(inventory.gpus, key=lambda g: g.index)
        if gpu.index not in claimed and gpu.processes == 0 and gpu.memory_used_mib < idle_used_mib
    ]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def fit(
    inventory: Inventory,
    *,
    gpus: int,
    tensor_parallel_size: int = 1,
    claimed: Collection[int] = (),
    min_memory_mib: int = 0,
    idle_used_mib: int = IDLE_USED_MIB,
) -> Fit | NoFit:
    """The GPUs for one replica needing `gpus` of them, or why there are none."""
    if gpus < 0 or tensor_parallel_size < 1:
        return NoFit(
            f"a replica cannot use {gpus} GPUs at tensor-parallel size {tensor_parallel_size}"
        )
    if gpus == 0:
        return Fit(())
    if gpus % tensor_parallel_size:
        return NoFit(
            f"{gpus} GPUs per replica is not a multiple of tensor-parallel size "
            f"{tensor_parallel_size}"
        )
    if gpus > len(inventory.gpus):
        return NoFit(f"needs {_plural(gpus, 'GPU')}, the node has {len(inventory.gpus)}")
    free = [
        gpu
        for gpu in free_gpus(inventory, claimed, idle_used_mib=idle_used_mib)
        if gpu.memory_free_mib >= min_memory_mib
    ]
    if len(free) < gpus:
        placed = len({gpu.index for gpu in inventory.gpus} & set(claimed))
        busy = len(inventory.gpus) - placed - len(free)
        detail = f"{len(free)} free"
        if placed:
            detail += f", {placed} placed by the gateway"
        if busy > 0:
            detail += f", {busy} busy with other processes or memory"
            if min_memory_mib:
                detail += f" or under {min_memory_mib} MiB free"
        return NoFit(f"needs {_plural(gpus, 'free GPU')}: {detail}")
    if tensor_parallel_size == 1:
        return Fit(tuple(gpu.index for gpu in free[:gpus]))
    by_domain: dict[int, list[Gpu]] = {}
    for gpu in free:
        by_domain.setdefault(gpu.nvlink_domain, []).append(gpu)
    # With tensor parallelism the whole replica is placed inside one domain (a replica
    # of several TP groups, pipeline-parallel, is kept whole too: simpler, and what a
    # node of one or two NVLink domains allows anyway).
    fitting = [group for group in by_domain.values() if len(group) >= gpus]
    if not fitting:
        largest = max(len(group) for group in by_domain.values())
        return NoFit(
            f"needs {_plural(gpus, 'free GPU')} in one NVLink domain: {len(free)} free "
            f"across {_plural(len(by_domain), 'domain')}, at most {largest} in one"
        )
    group = min(fitting, key=lambda g: (len(g), g[0].index))
    return Fit(tuple(gpu.index for gpu in group[:gpus]))
