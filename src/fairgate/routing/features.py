"""What routing needs to know about one request, computed once by the caller."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RequestFeatures"]


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class RequestFeatures:
    """The request as the routing plugins see it.

    ``model`` is the canonical model name (aliases already resolved);
    ``session_key`` is the value session affinity hashes (a session header, or
    the key id when there is none; ``None`` disables affinity for the request);
    ``prefix_hashes`` are the chained hashes of the prompt's leading blocks
    (:func:`fairgate.routing.prefix.prefix_hashes`), empty when unknown;
    ``within_share`` says how fair share admitted the request (True within its
    organisation's reservation, False borrowing, ``None`` outside fair share or
    with share-aware routing off), which the ``fair-share`` filter reads.
    """

    model: str
    session_key: str | None = None
    prefix_hashes: tuple[int, ...] = ()
    within_share: bool | None = None
