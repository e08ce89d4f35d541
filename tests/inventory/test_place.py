"""Placing a model's replicas over several nodes, and saying why one cannot run."""

from __future__ import annotations

from tests.inventory.test_inventory import smi_inventory

from fairgate.inventory import Inventory
from fairgate.inventory.place import Node, Placement, Want, place

HGX = smi_inventory("hgx-h100")  # 8 GPUs on NVSwitch, GPU 5 busy with another job
PAIRS = smi_inventory("pcie-a6000-pairs")  # 0-1 and 2-3 bridged, GPU 2 holds memory


def test_replicas_spread_across_nodes_and_the_rest_is_explained() -> None:
    nodes = [Node("gpu01", HGX), Node("gpu02", HGX)]
    plan = place(Want("llama-70b", replicas=5, gpus_per_replica=4, tensor_parallel_size=4), nodes)
    assert [(p.node, p.gpus) for p in plan.new] == [
        ("gpu01", (0, 1, 2, 3)),
        ("gpu02", (0, 1, 2, 3)),
    ]
    assert plan.missing == 3
    assert plan.reason == (
        "gpu01: needs 4 free GPUs: 3 free, 4 placed by the gateway, "
        "1 busy with other processes or memory; "
        "gpu02: needs 4 free GPUs: 3 free, 4 placed by the gateway, "
        "1 busy with other processes or memory"
    )


def test_a_tp_group_is_not_split_over_nvlink_domains() -> None:
    plan = place(
        Want("m", replicas=1, gpus_per_replica=4, tensor_parallel_size=4),
        [Node("ws01", PAIRS)],
    )
    assert plan.new == () and plan.missing == 1
    assert plan.reason == ("ws01: needs 4 free GPUs: 3 free, 1 busy with other processes or memory")
    quiet = Inventory.model_validate(
        {
            **PAIRS.model_dump(),
            "gpus": [{**g.model_dump(), "memory_used_mib": 0} for g in PAIRS.gpus],
        }
    )
    plan = place(
        Want("m", replicas=1, gpus_per_replica=4, tensor_parallel_size=4), [Node("gpu03", quiet)]
    )
    assert plan.reason == (
        "gpu03: needs 4 free GPUs in one NVLink domain: 4 free across 2 domains, at most 2 in one"
    )


def test_labels_cordons_and_existing_replicas_are_respected() -> None:
    nodes = [
        Node("a", HGX, labels={"site": "paris"}),
        Node("b", HGX, labels={"site": "lyon"}),
        Node("c", HGX, labels={"site": "paris"}, schedulable=False),
    ]
    want = Want(
        "m", replicas=2, gpus_per_replica=2, tensor_parallel_size=2, node_labels={"site": "paris"}
    )
    already = [Placement("m", "a", (0, 1))]
    nodes[0] = Node("a", HGX, labels={"site": "paris"}, claimed=frozenset({0, 1}))
    plan = place(want, nodes, already)
    assert plan.new == (Placement("m", "a", (2, 3)),)
    assert plan.missing == 0 and plan.reason == ""
    plan = place(Want("m", replicas=1, gpus_per_replica=1, node_labels={"site": "nice"}), nodes)
    assert plan.reason == (
        "a: lacks the label site=nice; b: lacks the label site=nice; "
        "c: takes no new replicas (cordoned, draining or unreachable)"
    )
    assert place(Want("m", 1, 1), []).reason == "no node has registered"


def test_the_simulator_needs_no_gpu() -> None:
    nodes = [Node("cpu01", Inventory(source="none")), Node("cpu02", Inventory(source="none"))]
    plan = place(Want("sim", replicas=3, gpus_per_replica=0), nodes)
    assert [p.node for p in plan.new] == ["cpu01", "cpu02", "cpu01"]
    assert plan.missing == 0
