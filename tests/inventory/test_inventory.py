"""The inventory parsers on nvidia-smi outputs and NVML link lists of two kinds of node,
and the fit of replica profiles on them.

`recorded/` holds, per node, the four nvidia-smi outputs the fallback reads and the
NVML link list the NVML probe builds: an HGX H100 baseboard (8 GPUs on NVSwitch, GPU 5
running another job) and a workstation with four RTX A6000 in two NVLink-bridged pairs
(GPU 2 holding 2.3 GiB for a display). They are written in the exact format those
machines print (tab-separated matrix, `nounits` CSV), not captured from a particular
machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from fairgate.inventory import Fit, Inventory, NoFit, domains_from_links, fit
from fairgate.inventory.nvml import domains_from_nvml_links
from fairgate.inventory.smi import (
    COMMANDS,
    SmiError,
    inventory_from_smi,
    parse_compute_apps,
    parse_query_gpu,
    parse_topology,
)

RECORDED = Path(__file__).parent / "recorded"
FILES = {
    "gpus": "query-gpu.csv",
    "apps": "compute-apps.csv",
    "topology": "topo-m.txt",
    "banner": "nvidia-smi.txt",
}


def recorded_runner(node: str):
    outputs = {
        tuple(COMMANDS[what]): (RECORDED / node / name).read_text() for what, name in FILES.items()
    }

    def run(argv: list[str]) -> str:
        return outputs[tuple(argv)]

    return run


def smi_inventory(node: str) -> Inventory:
    return inventory_from_smi(recorded_runner(node))


def test_hgx_is_one_nvlink_domain_with_versions_and_measured_use() -> None:
    inv = smi_inventory("hgx-h100")
    assert inv.source == "nvidia-smi"
    assert (inv.driver_version, inv.cuda_version) == ("550.54.15", "12.4")
    assert [g.index for g in inv.gpus] == list(range(8))
    assert {g.name for g in inv.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert {g.nvlink_domain for g in inv.gpus} == {0}
    assert inv.gpus[5].processes == 1 and inv.gpus[5].memory_used_mib == 61440
    assert inv.gpus[0].memory_total_mib == 81559
    assert inv.gpus[0].uuid.startswith("GPU-2f9c")


def test_pcie_pairs_are_two_domains() -> None:
    inv = smi_inventory("pcie-a6000-pairs")
    assert (inv.driver_version, inv.cuda_version) == ("535.183.01", "12.2")
    assert [g.nvlink_domain for g in inv.gpus] == [0, 0, 1, 1]
    assert all(g.processes == 0 for g in inv.gpus)


@pytest.mark.parametrize("node", ["hgx-h100", "pcie-a6000-pairs"])
def test_nvml_links_give_the_same_domains_as_the_matrix(node: str) -> None:
    recorded = json.loads((RECORDED / node / "nvml-links.json").read_text())
    links = {int(i): [(kind, bus) for kind, bus in gpu] for i, gpu in recorded["links"].items()}
    from_nvml = domains_from_nvml_links(recorded["bus_ids"], links)
    assert from_nvml == [g.nvlink_domain for g in smi_inventory(node).gpus]


def test_nvml_bus_ids_match_across_spellings() -> None:
    # NVML's remote PCI info may spell the domain with 4 digits where the GPU's own has 8.
    buses = ["00000000:01:00.0", "00000000:25:00.0", "00000000:C1:00.0"]
    links = {0: [("gpu", "0000:25:00.0")], 1: [("gpu", "0000:01:00.0")], 2: []}
    assert domains_from_nvml_links(buses, links) == [0, 0, 1]


def test_domains_are_connected_components() -> None:
    assert domains_from_links(5, [(3, 4), (0, 2)]) == [0, 1, 0, 2, 2]
    assert domains_from_links(3, []) == [0, 1, 2]
    with pytest.raises(ValueError, match="only 3 GPUs"):
        domains_from_links(3, [(0, 3)])


def test_tensor_parallel_group_needs_one_domain() -> None:
    inv = smi_inventory("pcie-a6000-pairs")
    # GPU 2 holds 2.3 GiB (a display) though it runs no compute process: not free.
    assert fit(inv, gpus=2, tensor_parallel_size=2) == Fit((0, 1))
    refused = fit(inv, gpus=2, tensor_parallel_size=2, claimed={0})
    assert isinstance(refused, NoFit)
    assert refused.reason == (
        "needs 2 free GPUs in one NVLink domain: 2 free across 2 domains, at most 1 in one"
    )
    # Without the display's memory the second pair fits, and takes the smaller domain.
    assert fit(inv, gpus=2, tensor_parallel_size=2, claimed={0}, idle_used_mib=4096) == Fit((2, 3))
    four = fit(inv, gpus=4, tensor_parallel_size=4, idle_used_mib=4096)
    assert four == NoFit(
        "needs 4 free GPUs in one NVLink domain: 4 free across 2 domains, at most 2 in one"
    )
    # Without tensor parallelism any free GPUs do.
    assert fit(inv, gpus=2, tensor_parallel_size=1, claimed={0}) == Fit((1, 3))


def test_a_gpu_busy_with_another_job_is_not_free() -> None:
    inv = smi_inventory("hgx-h100")
    assert fit(inv, gpus=8, tensor_parallel_size=8) == NoFit(
        "needs 8 free GPUs: 7 free, 1 busy with other processes or memory"
    )
    assert fit(inv, gpus=4, tensor_parallel_size=4, claimed={0, 1}) == Fit((2, 3, 4, 6))
    assert fit(inv, gpus=4, tensor_parallel_size=4, claimed={0, 1, 2, 3}) == NoFit(
        "needs 4 free GPUs: 3 free, 4 placed by the gateway, 1 busy with other processes or memory"
    )
    assert fit(inv, gpus=1, min_memory_mib=90_000) == NoFit(
        "needs 1 free GPU: 0 free, 8 busy with other processes or memory or under 90000 MiB free"
    )


def test_profiles_that_cannot_fit_any_node_say_so() -> None:
    inv = smi_inventory("pcie-a6000-pairs")
    assert fit(inv, gpus=8, tensor_parallel_size=8) == NoFit("needs 8 GPUs, the node has 4")
    assert fit(inv, gpus=3, tensor_parallel_size=2) == NoFit(
        "3 GPUs per replica is not a multiple of tensor-parallel size 2"
    )
    assert fit(Inventory(source="none"), gpus=0) == Fit(())  # the simulated engine


def test_recorded_inventory_round_trips_and_is_validated() -> None:
    inv = smi_inventory("hgx-h100")
    assert Inventory.from_json(inv.to_json()) == inv
    raw = json.loads(inv.to_json())
    raw["gpus"][1]["index"] = 0
    with pytest.raises(ValidationError, match="GPU indices repeat"):
        Inventory.from_json(json.dumps(raw))
    raw = json.loads(inv.to_json())
    raw["gpus"][0]["memory_used_mib"] = -1
    with pytest.raises(ValidationError, match="memory_used_mib"):
        Inventory.from_json(json.dumps(raw))
    raw = json.loads(inv.to_json())
    raw["gpus"][0]["mig"] = True
    with pytest.raises(ValidationError, match="mig"):
        Inventory.from_json(json.dumps(raw))


def test_garbled_outputs_are_refused_naming_the_line() -> None:
    with pytest.raises(SmiError, match="expected 8 fields"):
        parse_query_gpu("0, GPU-1, NVIDIA H100, 81559\n")
    with pytest.raises(SmiError, match=r"not a number of MiB \('\[N/A\]'\)"):
        parse_query_gpu("0, GPU-1, NVIDIA H100, [N/A], 0, 1, 550.54.15, 00000000:18:00.0\n")
    with pytest.raises(SmiError, match="no header row"):
        parse_topology("GPU0\t X \n")
    assert parse_compute_apps("No running processes found\n") == {}
    text = (RECORDED / "pcie-a6000-pairs" / "topo-m.txt").read_text()
    shorter = "\n".join(line for line in text.splitlines() if not line.startswith("GPU3"))
    outputs = recorded_runner("pcie-a6000-pairs")

    def run(argv: list[str]) -> str:
        return shorter if argv == COMMANDS["topology"] else outputs(argv)

    with pytest.raises(SmiError, match=r"GPU rows \[0, 1, 2\] for GPU columns \[0, 1, 2, 3\]"):
        inventory_from_smi(run)
