"""filter → score → pick: one routing decision, with its rationale.

    total(r) = Σ weightᵢ · scoreᵢ(r) / Σ weightᵢ

Worked example, strategy ``{queue-depth: 2, kv-usage: 1}`` and max-score,
replicas a (waiting 0, KV 0.9) and b (waiting 4, KV 0.1):

    queue-depth  a 1.0   b 0.5
    kv-usage     a 0.1   b 0.9
    total        a (2·1.0 + 0.1)/3 = 0.70    b (2·0.5 + 0.9)/3 = 0.63   →  a

Cost: O(replicas × plugins) plus each scorer's per-request work.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.decision import Decision, FilterDrop
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState
from fairgate.routing.strategy import Strategy

__all__ = ["route"]

_NO_STATE = RoutingState()


def route(
    strategy: Strategy,
    snapshots: Sequence[ReplicaSnapshot],
    features: RequestFeatures,
    rng: random.Random,
    state: RoutingState | None = None,
) -> Decision:
    """Choose a replica of ``snapshots``; ``Decision.replica`` is None when no replica is left.

    Raises ``ValueError`` if a scorer breaks its contract (one score per replica).
    """
    state = _NO_STATE if state is None else state
    candidates = list(snapshots)
    drops: list[FilterDrop] = []
    for plugin in strategy.filters:
        kept = plugin.filter(candidates, features)
        kept_names = {r.name for r in kept}
        drops.append(
            FilterDrop(plugin.name, tuple(r.name for r in candidates if r.name not in kept_names))
        )
        candidates = kept
    names = [r.name for r in candidates]
    totals = [0.0] * len(candidates)
    scores: dict[str, dict[str, float]] = {}
    for weighted in strategy.scorers:
        values = weighted.scorer.score(candidates, features, state)
        if len(values) != len(candidates):
            raise ValueError(f"scorer {weighted.scorer.name} returned {len(values)} scores")
        scores[weighted.scorer.name] = dict(zip(names, values, strict=True))
        for i, value in enumerate(values):
            totals[i] += weighted.weight * value
    weight_sum = sum(ws.weight for ws in strategy.scorers)
    if weight_sum > 0:
        totals = [t / weight_sum for t in totals]
    pick = strategy.picker.pick(list(zip(candidates, totals, strict=True)), rng, state.cursor)
    return Decision(
        strategy=strategy.name,
        model=features.model,
        replica=None if pick.replica is None else pick.replica.name,
        drops=tuple(drops),
        scores=scores,
        totals=dict(zip(names, totals, strict=True)),
        cursor=pick.cursor,
    )
