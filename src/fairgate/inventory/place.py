"""Where a model's wanted replicas run: nodes that fit, spread across nodes, and for
every replica that cannot run, why — per node, in one sentence an operator can act on.

Pure: the control plane gives the nodes (inventory, labels, whether they take new
replicas, the GPUs already placed) and the replicas already placed; `place` answers
the new placements and the reasons for the ones it could not make. Spreading: each
new replica goes to the node holding the fewest replicas of the model so far (ties by
name), so losing one node loses as few as possible.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fairgate.inventory.fit import Fit, fit
from fairgate.inventory.model import Inventory

__all__ = ["Node", "Placement", "Plan", "Want", "place"]


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    inventory: Inventory
    labels: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True
    """False when cordoned, draining, unreachable or lost: it takes no new replica."""
    claimed: frozenset[int] = frozenset()
    """GPUs this node's placed replicas hold."""
    why_not: str = ""
    """Why it is not schedulable, in the words the explanation shows (e.g. "is cordoned")."""


@dataclass(frozen=True, slots=True)
class Want:
    model: str
    replicas: int
    gpus_per_replica: int
    tensor_parallel_size: int = 1
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Placement:
    model: str
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    new: tuple[Placement, ...]
    missing: int
    """Wanted replicas that could not be placed."""
    reason: str
    """Why (empty when nothing is missing): one clause per node that was considered."""


def place(want: Want, nodes: Sequence[Node], placed: Sequence[Placement] = ()) -> Plan:
    held = {node.name: set(node.claimed) for node in nodes}
    per_node = {node.name: 0 for node in nodes}
    for p in placed:
        if p.model == want.model and p.node in per_node:
            per_node[p.node] += 1
    need = want.replicas - sum(1 for p in placed if p.model == want.model)
    new: list[Placement] = []
    refusals: dict[str, str] = {}
    while need > 0:
        candidates = []
        for node in nodes:
            why = _excluded(node, want)
            if why:
                refusals[node.name] = why
                continue
            answer = fit(
                node.inventory,
                gpus=want.gpus_per_replica,
                tensor_parallel_size=want.tensor_parallel_size,
                claimed=held[node.name],
            )
            if isinstance(answer, Fit):
                candidates.append((per_node[node.name], node.name, answer))
            else:
                refusals[node.name] = answer.reason
        if not candidates:
            break
        _, name, chosen = min(candidates, key=lambda c: (c[0], c[1]))
        new.append(Placement(want.model, name, chosen.gpus))
        held[name].update(chosen.gpus)
        per_node[name] += 1
        refusals.pop(name, None)
        need -= 1
    missing = max(need, 0)
    reason = ""
    if missing:
        if not nodes:
            reason = "no node has registered"
        else:
            reason = "; ".join(f"{name}: {why}" for name, why in sorted(refusals.items()))
    return Plan(tuple(new), missing, reason)


def _excluded(node: Node, want: Want) -> str:
    if not node.schedulable:
        return node.why_not or "takes no new replicas (cordoned, draining or unreachable)"
    wrong = [
        f"{key}={value}"
        for key, value in sorted(want.node_labels.items())
        if node.labels.get(key) != value
    ]
    if wrong:
        return f"lacks the label {', '.join(wrong)}"
    return ""
