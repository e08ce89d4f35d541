"""filter → score → pick: one routing decision, with its rationale.

    total(r) = Σ weightᵢ · scoreᵢ(r) / Σ weightᵢ

Worked example, strategy ``{queue-depth: 2, kv-usage: 1}`` and max-score,
replicas a (waiting 0, KV 0.9) and b (waiting 4, KV 0.1):

    queue-depth  a 1.0   b 0.5
    kv-usage     a 0.1   b 0.9
    total        a (2·1.0 + 0.1)/3 = 0.70    b (2·0.5 + 0.9)/3 = 0.63   →  a

Cost: O(replicas × plugins) plus each scorer's per-request work; when the
filters leave one replica (or none), no scorer runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, mul

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.decision import Decision, FilterDrop
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState
from fairgate.routing.strategy import Strategy

__all__ = ["route"]

_NO_STATE = RoutingState()
_name = attrgetter("name")


def route(
    strategy: Strategy,
    snapshots: Sequence[ReplicaSnapshot],
    features: RequestFeatures,
    rng: random.Random,
    state: RoutingState | None = None,
) -> Decision:
    """Choose a replica of ``snapshots``; ``Decision.replica`` is None when no replica is left.

    Raises ``ValueError`` if a scorer breaks its contract (one score per replica).
    The decision's mappings are built only when read (see :class:`Decision`).
    """
    state = _NO_STATE if state is None else state
    candidates = snapshots
    count = len(candidates)
    dropped: list[FilterDrop] = []
    for plugin in strategy.filters:
        kept = plugin.filter(candidates, features)
        # A filter keeps a subset in order, so an equal length means nothing was removed.
        left = len(kept)
        if left != count:
            kept_ids = {id(r) for r in kept}
            removed = tuple(r.name for r in candidates if id(r) not in kept_ids)
            dropped.append(FilterDrop(plugin.name, removed))
        candidates, count = kept, left
    if count <= 1:
        # Nothing to choose between: no scorer runs (the decision shows no scores).
        return Decision.from_pass(
            strategy.name,
            features.model,
            candidates[0].name if count else None,
            state.cursor,
            filters=strategy.filter_names,
            dropped=tuple(dropped),
            names=(),
            scorers=(),
            values=(),
            totals=(),
        )
    scorers = strategy.scorers
    values_by_scorer = [ws.scorer.score(candidates, features, state) for ws in scorers]
    # One weighted sum per replica over its column of scores, all in C: for each
    # column, sum(map(mul, shares, column)). The strict zip fails on scorers of
    # unequal lengths; then, or when they all are off, say which scorer broke the
    # contract.
    shares = strategy.shares
    totals: list[float]
    try:
        if values_by_scorer:
            columns = zip(*values_by_scorer, strict=True)
            totals = list(map(sum, map(map, repeat(mul), repeat(shares), columns)))
        else:
            totals = [0.0] * count
        if len(totals) != count:
            raise ValueError("scores per replica")
    except ValueError:
        for ws, values in zip(scorers, values_by_scorer, strict=True):
            if len(values) != count:
                raise ValueError(f"scorer {ws.scorer.name} returned {len(values)} scores") from None
        raise
    pick = strategy.picker.pick(list(zip(candidates, totals, strict=True)), rng, state.cursor)
    return Decision.from_pass(
        strategy.name,
        features.model,
        None if pick.replica is None else pick.replica.name,
        pick.cursor,
        filters=strategy.filter_names,
        dropped=tuple(dropped),
        names=list(map(_name, candidates)),
        scorers=strategy.scorer_names,
        values=values_by_scorer,
        totals=totals,
    )
