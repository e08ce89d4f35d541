"""``serves-model``: drops replicas that do not serve the requested model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures

__all__ = ["ServesModelFilter"]


@dataclass(frozen=True, slots=True)
class ServesModelFilter:
    """Keeps replicas whose ``model`` equals the request's canonical model name. No parameters."""

    name: ClassVar[str] = "serves-model"

    def filter(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures
    ) -> list[ReplicaSnapshot]:
        return [r for r in replicas if r.model == request.model]
