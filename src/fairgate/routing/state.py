"""The routing state a caller owns and hands in: policies keep none of their own."""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.routing.prefix import PrefixIndex

__all__ = ["RoutingState"]


@dataclass(frozen=True, slots=True)
class RoutingState:
    """Per-model state kept by the caller between decisions.

    ``cursor`` is the round-robin position: pass the previous
    ``Decision.cursor`` back in. ``prefix_index`` is what the prefix-affinity
    scorer reads (``None``: no prefix affinity); the caller records each sent
    request's prefix hashes in it.
    """

    cursor: int = 0
    prefix_index: PrefixIndex | None = None
