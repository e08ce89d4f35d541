"""Built-in scorers: each rates every replica in [0, 1], higher is better."""

from __future__ import annotations

from fairgate.routing.scorers.in_flight import InFlightScorer
from fairgate.routing.scorers.kv_usage import KvUsageScorer
from fairgate.routing.scorers.prefix_affinity import PrefixAffinityScorer
from fairgate.routing.scorers.queue_depth import QueueDepthScorer
from fairgate.routing.scorers.session_affinity import SessionAffinityScorer
from fairgate.routing.scorers.weight import WeightScorer

__all__ = [
    "InFlightScorer",
    "KvUsageScorer",
    "PrefixAffinityScorer",
    "QueueDepthScorer",
    "SessionAffinityScorer",
    "WeightScorer",
]
