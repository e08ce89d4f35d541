"""A routing decision and its rationale: what each filter dropped, what each scorer said.

A decision made by :func:`fairgate.routing.route` keeps the raw lists the
routing pass computed anyway and builds its mappings (``drops``, ``scores``,
``totals``) only when first read, so a decision nobody explains costs no more
than the pass itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Decision", "FilterDrop"]


@dataclass(frozen=True, slots=True)
class FilterDrop:
    """The replicas one filter removed (empty when it removed none)."""

    filter: str
    replicas: tuple[str, ...]


class Decision:
    """Where one request goes, and why. Read-only once made.

    ``replica`` is the chosen replica's name, ``None`` when no replica was left
    (the drops say which filter removed them). ``drops`` has one entry per
    filter, in the order they ran; ``dropped`` only those that removed
    something. ``scores`` maps each scorer's name to its score per remaining
    replica; ``totals`` holds the weighted total per replica. ``cursor`` is the
    round-robin cursor to hand in next time.
    """

    __slots__ = (
        "_drops",
        "_filters",
        "_names",
        "_scorers",
        "_scores",
        "_totals",
        "_totals_raw",
        "_values",
        "cursor",
        "dropped",
        "model",
        "replica",
        "strategy",
    )

    def __init__(
        self,
        strategy: str,
        model: str,
        replica: str | None,
        drops: Sequence[FilterDrop],
        scores: Mapping[str, Mapping[str, float]],
        totals: Mapping[str, float],
        cursor: int,
    ) -> None:
        self.strategy = strategy
        self.model = model
        self.replica = replica
        self.cursor = cursor
        self.dropped = tuple(d for d in drops if d.replicas)
        self._drops: tuple[FilterDrop, ...] | None = tuple(drops)
        self._scores: Mapping[str, Mapping[str, float]] | None = scores
        self._totals: Mapping[str, float] | None = totals
        self._filters: tuple[str, ...] = ()
        self._names: Sequence[str] = ()
        self._scorers: tuple[str, ...] = ()
        self._values: Sequence[Sequence[float]] = ()
        self._totals_raw: Sequence[float] = ()

    @classmethod
    def from_pass(
        cls,
        strategy: str,
        model: str,
        replica: str | None,
        cursor: int,
        *,
        filters: tuple[str, ...],
        dropped: tuple[FilterDrop, ...],
        names: Sequence[str],
        scorers: tuple[str, ...],
        values: Sequence[Sequence[float]],
        totals: Sequence[float],
    ) -> Decision:
        """A decision from the raw lists of one routing pass, its mappings built on first read.

        ``filters`` names every filter in the order it ran, ``dropped`` the
        non-empty drops; ``names`` are the replicas left after the filters,
        ``values[i]`` the scores of ``scorers[i]`` aligned with ``names``, and
        ``totals`` the weighted totals aligned with ``names``.
        """
        made = cls.__new__(cls)
        made.strategy = strategy
        made.model = model
        made.replica = replica
        made.cursor = cursor
        made.dropped = dropped
        made._drops = None
        made._scores = None
        made._totals = None
        made._filters = filters
        made._names = names
        made._scorers = scorers
        made._values = values
        made._totals_raw = totals
        return made

    @property
    def drops(self) -> tuple[FilterDrop, ...]:
        if self._drops is None:
            removed = {d.filter: d.replicas for d in self.dropped}
            self._drops = tuple(FilterDrop(f, removed.get(f, ())) for f in self._filters)
        return self._drops

    @property
    def scores(self) -> Mapping[str, Mapping[str, float]]:
        if self._scores is None:
            self._scores = {
                scorer: dict(zip(self._names, values, strict=True))
                for scorer, values in zip(self._scorers, self._values, strict=True)
            }
        return self._scores

    @property
    def totals(self) -> Mapping[str, float]:
        if self._totals is None:
            self._totals = dict(zip(self._names, self._totals_raw, strict=True))
        return self._totals

    def dropped_by(self, filter_name: str) -> tuple[str, ...]:
        """The replicas ``filter_name`` removed (empty if it removed none or did not run)."""
        for drop in self.dropped:
            if drop.filter == filter_name:
                return drop.replicas
        return ()

    def log_line(self) -> str:
        """One line for the debug log: choice, drops, then each replica's total and scores."""
        parts = [f"route strategy={self.strategy} model={self.model} replica={self.replica or '-'}"]
        dropped = [f"{d.filter}:{','.join(d.replicas)}" for d in self.dropped]
        parts.append(f"dropped=[{' '.join(dropped)}]")
        scores = self.scores
        for name, total in self.totals.items():
            detail = " ".join(f"{s}={v[name]:.3f}" for s, v in scores.items())
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

    def __repr__(self) -> str:
        return f"Decision({self.strategy}/{self.model} → {self.replica or '-'})"
