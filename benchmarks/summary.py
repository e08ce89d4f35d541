"""Percentiles of a set of latency samples, in microseconds.

Nearest-rank percentiles (the sample at rank ceil(q·n)), no interpolation: every figure
printed is a latency that was actually observed. With 2,000 samples p99 is the 20th
largest, so it moves with a handful of scheduler hiccups: compare p99 across repeated
runs, never within one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Summary", "percentile", "summarize"]


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted samples; q in (0, 1]; NaN if empty."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class Summary:
    """n samples; p50, p90, p99, mean, min and max in microseconds."""

    n: int
    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def summarize(samples_ns: Sequence[int]) -> Summary:
    """Summary of samples given in nanoseconds (what ``time.perf_counter_ns`` measures)."""
    ordered = sorted(s / 1000.0 for s in samples_ns)
    if not ordered:
        nan = math.nan
        return Summary(0, nan, nan, nan, nan, nan, nan)
    return Summary(
        n=len(ordered),
        p50=percentile(ordered, 0.50),
        p90=percentile(ordered, 0.90),
        p99=percentile(ordered, 0.99),
        mean=sum(ordered) / len(ordered),
        min=ordered[0],
        max=ordered[-1],
    )
