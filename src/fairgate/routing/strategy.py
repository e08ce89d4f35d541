"""A routing strategy: filters, weighted scorers and a picker, under one name.

Chat, batch and long-context routing are the same code with different
weights (see :func:`fairgate.routing.registry.preset`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
    """

    name: str
    filters: tuple[Filter, ...]
    scorers: tuple[WeightedScorer, ...]
    picker: Picker

    def __post_init__(self) -> None:
        for ws in self.scorers:
            if not (ws.weight >= 0 and math.isfinite(ws.weight)):
                raise ValueError(f"weight of {ws.scorer.name} must be ≥ 0, got {ws.weight!r}")
        for kind, names in (
            ("filter", [f.name for f in self.filters]),
            ("scorer", [ws.scorer.name for ws in self.scorers]),
        ):
            if len(set(names)) != len(names):
                raise ValueError(f"strategy {self.name}: a {kind} appears twice")
