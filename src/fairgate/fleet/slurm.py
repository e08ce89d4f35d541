"""The agent inside a Slurm allocation (`fairgate agent --slurm`): its GPUs and end time.

Slurm tells a job what it was given in its environment:

- `CUDA_VISIBLE_DEVICES`: the GPUs of the allocation, as CUDA should name them inside
  the job (indices, or `GPU-…` UUIDs); `SLURM_JOB_GPUS` (or `SLURM_STEP_GPUS`): the same
  GPUs by their index on the node.
- `SLURM_JOB_END_TIME` and `SLURM_JOB_START_TIME`: UNIX seconds (recent Slurm releases);
  where only the start is known, `SBATCH_TIMELIMIT` — the `--time` the operator set in the
  environment — gives the end (Slurm does not export the limit itself).

The node's inventory is narrowed to the allocation's GPUs, and each engine is handed its
GPUs by the names Slurm gave (`CUDA_VISIBLE_DEVICES` entries), which are right whether
or not the node's cgroups hide the other GPUs. No `scontrol` or `squeue` call is made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from fairgate.inventory.model import Gpu, Inventory

__all__ = ["Allocation", "SlurmError", "parse_time_limit"]


class SlurmError(ValueError):
    """The environment is not a usable Slurm allocation (the message says why)."""


_LIMIT = re.compile(
    r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$"
)


def parse_time_limit(text: str) -> int | None:
    """Seconds in a Slurm time limit (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`,
    `D-HH:MM:SS`); None for `UNLIMITED`/`INFINITE` or what does not parse."""
    match = _LIMIT.match(text.strip())
    if match is None:
        return None
    if match["days"] is not None:
        return (
            int(match["days"]) * 86400
            + int(match["dh"]) * 3600
            + int(match["dm"] or 0) * 60
            + int(match["ds"] or 0)
        )
    a, b, c = match["a"], match["b"], match["c"]
    if c is not None:  # HH:MM:SS
        return int(a) * 3600 + int(b) * 60 + int(c)
    if b is not None:  # MM:SS
        return int(a) * 60 + int(b)
    return int(a) * 60  # MM


def _ints(text: str) -> list[int] | None:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Allocation:
    job_id: str
    visible: tuple[str, ...]
    """CUDA_VISIBLE_DEVICES' entries, in order."""
    node_indices: tuple[int, ...] | None
    """SLURM_JOB_GPUS: the same GPUs by node index, when Slurm said."""
    ends_at: int
    """UNIX seconds; 0 when unknown."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Allocation:
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
        if not job_id:
            raise SlurmError("--slurm: SLURM_JOB_ID is not set (run the agent inside sbatch)")
        visible = tuple(
            x.strip() for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()
        )
        raw_gpus = env.get("SLURM_JOB_GPUS") or env.get("SLURM_STEP_GPUS") or ""
        node_indices = _ints(raw_gpus) if raw_gpus else None
        if node_indices is not None and visible and len(node_indices) != len(visible):
            node_indices = None  # they disagree: trust CUDA_VISIBLE_DEVICES alone
        return cls(job_id, visible, tuple(node_indices) if node_indices else None, _ends_at(env))

    def _matches(self, inventory: Inventory) -> list[tuple[Gpu, str]]:
        """Each allocated GPU of the inventory with the name the engine gets for it."""
        by_index = {gpu.index: gpu for gpu in inventory.gpus}
        by_uuid = {gpu.uuid: gpu for gpu in inventory.gpus}
        if self.visible and all(v.startswith(("GPU-", "MIG-")) for v in self.visible):
            return [(by_uuid[v], v) for v in self.visible if v in by_uuid]
        if self.node_indices and all(i in by_index for i in self.node_indices):
            names = self.visible or tuple(str(i) for i in self.node_indices)
            return [(by_index[i], n) for i, n in zip(self.node_indices, names, strict=True)]
        if self.visible and len(self.visible) == len(inventory.gpus):
            # The job's cgroup hides the other GPUs: the node shows only these.
            ordered = sorted(inventory.gpus, key=lambda g: g.index)
            return list(zip(ordered, self.visible, strict=True))
        indices = _ints(",".join(self.visible)) or []
        return [(by_index[i], str(i)) for i in indices if i in by_index]

    def restrict(self, inventory: Inventory) -> Inventory:
        """The inventory with only the allocation's GPUs."""
        keep = {gpu.index for gpu, _ in self._matches(inventory)}
        return inventory.model_copy(
            update={"gpus": tuple(g for g in inventory.gpus if g.index in keep)}
        )

    def devices(self, inventory: Inventory, gpus: tuple[int, ...]) -> tuple[str, ...]:
        """CUDA_VISIBLE_DEVICES entries for the node's GPUs `gpus`."""
        names = {gpu.index: name for gpu, name in self._matches(inventory)}
        return tuple(names.get(g, str(g)) for g in gpus)


def _ends_at(env: Mapping[str, str]) -> int:
    end = env.get("SLURM_JOB_END_TIME", "").strip()
    if end.isdigit() and int(end) > 0:
        return int(end)
    start = env.get("SLURM_JOB_START_TIME", "").strip()
    limit = parse_time_limit(env.get("SBATCH_TIMELIMIT", ""))
    if start.isdigit() and limit is not None:
        return int(start) + limit
    return 0
