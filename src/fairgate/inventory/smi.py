"""The inventory from `nvidia-smi`'s outputs, for nodes where NVML cannot be loaded.

Four commands, each parsed on its own so the parsers can be tested on outputs recorded
on real machines (tests/inventory/recorded/):

- `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,
  driver_version,pci.bus_id --format=csv,noheader,nounits` — one line per GPU;
- `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits`
  — one line per compute process (empty, or a "No running processes found" line);
- `nvidia-smi topo -m` — the connection matrix; `NV<n>` between two GPUs is NVLink;
- `nvidia-smi` — only its banner's `CUDA Version: X.Y` (no query field carries it).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass

from fairgate.inventory.model import Gpu, Inventory, domains_from_links

__all__ = [
    "COMMANDS",
    "SmiError",
    "SmiGpu",
    "inventory_from_smi",
    "parse_compute_apps",
    "parse_cuda_version",
    "parse_query_gpu",
    "parse_topology",
]

QUERY_GPU_FIELDS = "index,uuid,name,memory.total,memory.used,memory.free,driver_version,pci.bus_id"
COMMANDS: dict[str, list[str]] = {
    "gpus": [
        "nvidia-smi",
        f"--query-gpu={QUERY_GPU_FIELDS}",
        "--format=csv,noheader,nounits",
    ],
    "apps": [
        "nvidia-smi",
        "--query-compute-apps=gpu_uuid,pid,used_memory",
        "--format=csv,noheader,nounits",
    ],
    "topology": ["nvidia-smi", "topo", "-m"],
    "banner": ["nvidia-smi"],
}
"""The argument lists the fallback runs, by what each output is parsed for."""

_NVLINK = re.compile(r"^NV\d+$")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")


class SmiError(ValueError):
    """An nvidia-smi output this parser does not understand (the line is named)."""


@dataclass(frozen=True, slots=True)
class SmiGpu:
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    memory_free_mib: int
    driver_version: str
    bus_id: str


def _mib(value: str, line: str) -> int:
    try:
        return int(float(value))
    except ValueError:
        raise SmiError(f"not a number of MiB ({value!r}) in: {line!r}") from None


def parse_query_gpu(text: str) -> list[SmiGpu]:
    """`--query-gpu=…` in CSV without header or units, one GPU per line."""
    gpus = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        line = ", ".join(row)
        if len(row) != 8:
            raise SmiError(f"expected 8 fields, got {len(row)}: {line!r}")
        index, uuid, name, total, used, free, driver, bus = (field.strip() for field in row)
        try:
            number = int(index)
        except ValueError:
            raise SmiError(f"not a GPU index ({index!r}) in: {line!r}") from None
        gpus.append(
            SmiGpu(
                index=number,
                uuid=uuid,
                name=name,
                memory_total_mib=_mib(total, line),
                memory_used_mib=_mib(used, line),
                memory_free_mib=_mib(free, line),
                driver_version=driver,
                bus_id=bus,
            )
        )
    return gpus


def parse_compute_apps(text: str) -> dict[str, int]:
    """Compute processes per GPU UUID from `--query-compute-apps=gpu_uuid,pid,used_memory`."""
    counts: dict[str, int] = {}
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) == 1 and "no running" in row[0].lower():
            continue
        if len(row) != 3:
            raise SmiError(f"expected 3 fields, got {len(row)}: {', '.join(row)!r}")
        uuid = row[0].strip()
        counts[uuid] = counts.get(uuid, 0) + 1
    return counts


def parse_topology(text: str) -> tuple[int, list[tuple[int, int]]]:
    """The GPU count and the NVLink pairs of `nvidia-smi topo -m`'s matrix.

    The header names the columns (`GPU0 … GPUn`, then NICs and affinities); each row
    starting `GPU<i>` gives its connection to every column. Only GPU-to-GPU cells are
    read; `NV<n>` (a bonded set of n links) is NVLink, anything else (`SYS`, `NODE`,
    `PHB`, `PXB`, `PIX`, `X`) is not.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if header_at is None:
        raise SmiError("no header row naming GPU columns in the topology matrix")
    columns = lines[header_at].split()
    gpu_columns = [int(m.group(1)) for c in columns if (m := _GPU_LABEL.match(c))]
    pairs: list[tuple[int, int]] = []
    rows: list[int] = []
    for line in lines[header_at + 1 :]:
        if line.startswith("Legend"):
            break
        cells = line.split()
        label = _GPU_LABEL.match(cells[0]) if cells else None
        if label is None:
            continue  # a NIC row
        row = int(label.group(1))
        rows.append(row)
        # A self cell is " X " (one token), so the GPU cells are the first len(gpu_columns).
        values = cells[1 : 1 + len(gpu_columns)]
        if len(values) != len(gpu_columns):
            raise SmiError(f"short topology row: {line!r}")
        for column, value in zip(gpu_columns, values, strict=True):
            if column != row and _NVLINK.match(value):
                pairs.append((row, column))
    if sorted(rows) != sorted(gpu_columns):
        raise SmiError(f"the topology matrix has GPU rows {rows} for GPU columns {gpu_columns}")
    return len(gpu_columns), pairs


def _is_header(line: str) -> bool:
    """The matrix's header: indented, its first word a GPU column (rows start flush)."""
    words = line.split()
    return bool(words) and line[0].isspace() and _GPU_LABEL.match(words[0]) is not None


def parse_cuda_version(text: str) -> str:
    """`CUDA Version: 12.4` from nvidia-smi's banner, or "" when absent."""
    match = _CUDA.search(text)
    return match.group(1) if match else ""


def inventory_from_smi(run: Callable[[list[str]], str]) -> Inventory:
    """Run the four commands through `run` (argument list in, stdout out) and join them."""
    gpus = parse_query_gpu(run(COMMANDS["gpus"]))
    apps = parse_compute_apps(run(COMMANDS["apps"]))
    count, pairs = parse_topology(run(COMMANDS["topology"])) if gpus else (0, [])
    if count != len(gpus):
        raise SmiError(f"the topology matrix has {count} GPUs, the query {len(gpus)}")
    indices = sorted(gpu.index for gpu in gpus)
    if indices != list(range(len(gpus))):
        raise SmiError(f"GPU indices are not 0..{len(gpus) - 1}: {indices}")
    domains = domains_from_links(len(gpus), pairs)
    cuda = parse_cuda_version(run(COMMANDS["banner"]))
    return Inventory(
        source="nvidia-smi",
        driver_version=gpus[0].driver_version if gpus else "",
        cuda_version=cuda,
        gpus=tuple(
            Gpu(
                index=gpu.index,
                uuid=gpu.uuid,
                name=gpu.name,
                memory_total_mib=gpu.memory_total_mib,
                memory_used_mib=gpu.memory_used_mib,
                memory_free_mib=gpu.memory_free_mib,
                bus_id=gpu.bus_id,
                processes=apps.get(gpu.uuid, 0),
                nvlink_domain=domains[gpu.index],
            )
            for gpu in sorted(gpus, key=lambda g: g.index)
        ),
    )
