"""``prefix-affinity``: prefers the replica that most likely still holds the prompt's prefix.

    score = leading blocks the replica saw recently / blocks hashed for the request

Reads the caller's :class:`~fairgate.routing.prefix.PrefixIndex` from the
routing state; scores 0 everywhere without an index or without prefix hashes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.state import RoutingState

__all__ = ["PrefixAffinityScorer"]


@dataclass(frozen=True, slots=True)
class PrefixAffinityScorer:
    """Scores the matched share of the request's prefix blocks. No parameters.

    Cost O(replicas × prefix blocks); the block size and count are set where
    the caller computes ``prefix_hashes``.
    """

    name: ClassVar[str] = "prefix-affinity"

    def score(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures, state: RoutingState
    ) -> list[float]:
        hashes = request.prefix_hashes
        index = state.prefix_index
        if not hashes or index is None:
            return [0.0] * len(replicas)
        return [index.matched(r.name, hashes) / len(hashes) for r in replicas]
