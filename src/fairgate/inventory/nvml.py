"""The inventory from NVML, through nvidia-ml-py (`pynvml`), read-only.

NVLink domains come from each GPU's active links: a link to another GPU joins the
two, a link to an NVSwitch joins the GPU to every other GPU that reaches a switch
(on one HGX baseboard the switches form one fabric). `links_of` reads the links of
one GPU; `domains_from_nvml_links` turns every GPU's links into domains, and is what
the tests run on topologies recorded from real machines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fairgate.inventory.model import Gpu, Inventory, domains_from_links

__all__ = ["NvmlUnavailable", "domains_from_nvml_links", "inventory_from_nvml"]

RemoteKind = Literal["gpu", "switch", "other"]
Link = tuple[RemoteKind, str]
"""An active NVLink: what is at the far end, and its PCI bus id."""


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised (no driver, no GPU, no library)."""


def _bus(bus_id: str) -> str:
    # NVML spells bus ids with 8 domain digits ("00000000:18:00.0"), some tools with 4.
    domain, _, rest = bus_id.strip().lower().rpartition(":")
    head = domain.split(":")
    if len(head) == 2:
        head[0] = head[0][-4:].rjust(4, "0")
    return ":".join([*head, rest]) if domain else rest


def domains_from_nvml_links(
    bus_ids: Sequence[str], links: Mapping[int, Sequence[Link]]
) -> list[int]:
    """The domain of each GPU (by index) from its active links."""
    by_bus = {_bus(bus): index for index, bus in enumerate(bus_ids)}
    pairs: list[tuple[int, int]] = []
    on_switch: list[int] = []
    for index, gpu_links in links.items():
        for kind, remote in gpu_links:
            if kind == "switch":
                on_switch.append(index)
            elif kind == "gpu" and _bus(remote) in by_bus:
                pairs.append((index, by_bus[_bus(remote)]))
    pairs.extend((on_switch[0], other) for other in on_switch[1:])
    return domains_from_links(len(bus_ids), pairs)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _links_of(pynvml: Any, handle: Any) -> list[Link]:
    out: list[Link] = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
            remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            try:
                kind_code = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except pynvml.NVMLError:
                kind_code = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
        except pynvml.NVMLError:
            continue  # the link does not exist on this GPU, or the GPU has none
        kind: RemoteKind = (
            "switch"
            if kind_code == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
            else "gpu"
            if kind_code == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
            else "other"
        )
        out.append((kind, remote))
    return out


def inventory_from_nvml() -> Inventory:
    """Every GPU NVML sees; raises NvmlUnavailable when NVML cannot start."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise NvmlUnavailable(f"nvidia-ml-py is not installed: {exc}") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(str(exc)) from None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_code = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        cuda = f"{cuda_code // 1000}.{cuda_code % 1000 // 10}"
        rows = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            rows.append(
                (
                    index,
                    _text(pynvml.nvmlDeviceGetUUID(handle)),
                    _text(pynvml.nvmlDeviceGetName(handle)),
                    memory,
                    _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                    len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)),
                    _links_of(pynvml, handle),
                )
            )
    finally:
        pynvml.nvmlShutdown()
    domains = domains_from_nvml_links([row[4] for row in rows], {row[0]: row[6] for row in rows})
    mib = 1024 * 1024
    return Inventory(
        source="nvml",
        driver_version=driver,
        cuda_version=cuda,
        gpus=tuple(
            Gpu(
                index=index,
                uuid=uuid,
                name=name,
                memory_total_mib=memory.total // mib,
                memory_used_mib=memory.used // mib,
                memory_free_mib=memory.free // mib,
                bus_id=bus,
                processes=processes,
                nvlink_domain=domains[index],
            )
            for index, uuid, name, memory, bus, processes, _ in rows
        ),
    )
