"""The inventory's data: one node's GPUs and their NVLink domains, as JSON and back.

`fairgate agent inventory --json` prints `Inventory.to_json()`; `--inventory FILE`
reads it back with `Inventory.from_json`, which validates every field (a recorded
file is input like any other).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Gpu", "Inventory", "Source", "domains_from_links"]

Source = Literal["nvml", "nvidia-smi", "recorded", "none"]
"""Where an inventory came from; `none` is a node where neither NVML nor nvidia-smi ran."""


class Gpu(BaseModel):
    """One GPU as the node sees it now.

    `memory_used_mib` and `processes` are measured (NVML or nvidia-smi), not what the
    gateway believes it placed: a GPU busy with somebody else's job is not free.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    uuid: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=128)
    memory_total_mib: int = Field(ge=0)
    memory_used_mib: int = Field(ge=0)
    memory_free_mib: int = Field(ge=0)
    bus_id: str = Field(default="", max_length=64)
    processes: int = Field(default=0, ge=0)
    """Compute processes running on the GPU (any owner)."""
    nvlink_domain: int = Field(ge=0)
    """GPUs with the same number are joined by NVLink (directly or through NVSwitch); a
    GPU without NVLink is a domain of its own."""


class Inventory(BaseModel):
    """A node's hardware: driver and CUDA versions and every GPU, by index."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: Source
    driver_version: str = Field(default="", max_length=64)
    cuda_version: str = Field(default="", max_length=32)
    gpus: tuple[Gpu, ...] = ()

    @model_validator(mode="after")
    def _unique_indices(self) -> Inventory:
        indices = [gpu.index for gpu in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"GPU indices repeat: {sorted(indices)}")
        return self

    def domains(self) -> dict[int, tuple[Gpu, ...]]:
        """The GPUs of each NVLink domain, in index order."""
        out: dict[int, list[Gpu]] = {}
        for gpu in sorted(self.gpus, key=lambda g: g.index):
            out.setdefault(gpu.nvlink_domain, []).append(gpu)
        return {domain: tuple(gpus) for domain, gpus in sorted(out.items())}

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> Inventory:
        """A recorded inventory; raises pydantic's ValidationError naming the bad field."""
        return cls.model_validate_json(text)


def domains_from_links(count: int, links: Iterable[tuple[int, int]]) -> list[int]:
    """The NVLink domain of each of `count` GPUs, numbered from 0 by lowest GPU index.

    `links` are pairs of GPU indices joined by NVLink (a GPU that reaches an NVSwitch is
    given as linked to every other GPU that reaches one). Domains are the connected
    components: vLLM's tensor-parallel all-reduce runs over NVLink only inside one.
    """
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in links:
        if not (0 <= a < count and 0 <= b < count):
            raise ValueError(f"NVLink between GPU {a} and GPU {b}: only {count} GPUs")
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    numbering: dict[int, int] = {}
    out = []
    for i in range(count):
        out.append(numbering.setdefault(root(i), len(numbering)))
    return out
