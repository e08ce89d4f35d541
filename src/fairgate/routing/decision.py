"""A routing decision and its rationale: what each filter dropped, what each scorer said."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Decision", "FilterDrop"]


@dataclass(frozen=True, slots=True)
class FilterDrop:
    """The replicas one filter removed (empty when it removed none)."""

    filter: str
    replicas: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one request goes, and why.

    ``replica`` is the chosen replica's name, ``None`` when no replica was left
    (the drops say which filter removed them). ``drops`` has one entry per
    filter, in the order they ran. ``scores`` maps each scorer's name to its
    score per remaining replica; ``totals`` holds the weighted total per
    replica. ``cursor`` is the round-robin cursor to hand in next time.
    """

    strategy: str
    model: str
    replica: str | None
    drops: tuple[FilterDrop, ...]
    scores: Mapping[str, Mapping[str, float]]
    totals: Mapping[str, float]
    cursor: int

    def dropped_by(self, filter_name: str) -> tuple[str, ...]:
        """The replicas ``filter_name`` removed (empty if it removed none or did not run)."""
        for drop in self.drops:
            if drop.filter == filter_name:
                return drop.replicas
        return ()

    def log_line(self) -> str:
        """One line for the debug log: choice, drops, then each replica's total and scores."""
        parts = [f"route strategy={self.strategy} model={self.model} replica={self.replica or '-'}"]
        dropped = [f"{d.filter}:{','.join(d.replicas)}" for d in self.drops if d.replicas]
        parts.append(f"dropped=[{' '.join(dropped)}]")
        for name, total in self.totals.items():
            detail = " ".join(f"{s}={v[name]:.3f}" for s, v in self.scores.items())
            parts.append(f"{name}={total:.3f}({detail})")
        return " ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready form for structured logs and the admin API."""
        return {
            "strategy": self.strategy,
            "model": self.model,
            "replica": self.replica,
            "drops": {d.filter: list(d.replicas) for d in self.drops},
            "scores": {s: dict(v) for s, v in self.scores.items()},
            "totals": dict(self.totals),
        }
