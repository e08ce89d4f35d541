"""``kv-ceiling``: drops replicas whose KV cache is fuller than a ceiling."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures

__all__ = ["KvCeilingFilter"]


@dataclass(frozen=True, slots=True)
class KvCeilingFilter:
    """Drops replicas with ``kv_usage >= ceiling`` (a fraction in (0, 1]).

    A replica whose KV usage is unknown is kept: a failed scrape is not a full
    cache. vLLM fills its KV cache greedily, so under load every replica may sit
    above the ceiling; then, unless ``strict``, the filter keeps them all and
    leaves the choice to the scorers (saturation is admission's business, not a
    reason to refuse). With ``strict`` it drops them all and the request gets
    no replica. Raises ``ValueError`` for a ceiling outside (0, 1].
    """

    name: ClassVar[str] = "kv-ceiling"
    ceiling: float = 0.95
    strict: bool = False

    def __post_init__(self) -> None:
        if not (0.0 < self.ceiling <= 1.0) or not math.isfinite(self.ceiling):
            raise ValueError(f"ceiling must be in (0, 1], got {self.ceiling!r}")

    def filter(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures
    ) -> list[ReplicaSnapshot]:
        kept = [r for r in replicas if r.kv_usage is None or r.kv_usage < self.ceiling]
        if not kept and not self.strict:
            return list(replicas)
        return kept
