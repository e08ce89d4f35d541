"""A routing strategy: filters, weighted scorers and a picker, under one name.

Chat, batch and long-context routing are the same code with different
weights (see :func:`fairgate.routing.registry.preset`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fairgate.routing.plugin import Filter, Picker, Scorer

__all__ = ["Strategy", "WeightedScorer"]


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    """A scorer and its weight (finite, ≥ 0; 0 keeps the scorer in the rationale only)."""

    scorer: Scorer
    weight: float


@dataclass(frozen=True, slots=True)
class Strategy:
    """Filters run in order, scorers are summed with their weights, the picker chooses.

    Raises ``ValueError`` for a negative or non-finite weight, or for two
    filters or two scorers with the same name (the rationale is keyed by name).
    ``filter_names``, ``scorer_names`` and ``shares`` (each weight divided by
    the sum of the weights, all 0 when the sum is 0) are derived once here, so
    a routing pass does not recompute them.
    """

    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker
    filter_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    scorer_names: tuple[str, ...] = field(init=False, repr=False, compare=False)
    shares: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for ws in self.scorers:
            if not (ws.weight >= 0 and math.isfinite(ws.weight)):
                raise ValueError(f"weight of {ws.scorer.name} must be ≥ 0, got {ws.weight!r}")
        filter_names = tuple(f.name for f in self.filters)
        scorer_names = tuple(ws.scorer.name for ws in self.scorers)
        for kind, names in (("filter", filter_names), ("scorer", scorer_names)):
            if len(set(names)) != len(names):
                raise ValueError(f"strategy {self.name}: a {kind} appears twice")
        weight_sum = sum(ws.weight for ws in self.scorers)
        shares = tuple(ws.weight / weight_sum if weight_sum > 0 else 0.0 for ws in self.scorers)
        object.__setattr__(self, "filter_names", filter_names)
        object.__setattr__(self, "scorer_names", scorer_names)
        object.__setattr__(self, "shares", shares)

    @property
    def uses_session(self) -> bool:
        """Does a scorer read the request's session key (``session-affinity``)?"""
        return "session-affinity" in self.scorer_names

    @property
    def uses_prefix(self) -> bool:
        """Does a scorer read the request's prefix hashes (``prefix-affinity``)?"""
        return "prefix-affinity" in self.scorer_names
