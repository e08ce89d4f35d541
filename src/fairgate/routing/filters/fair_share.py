"""``fair-share``: keeps the replicas where the request can start without breaking fair share.

A fair-share pool's capacity C is spread over its replicas as ``seats``; the
gateway counts its within-share and borrowing requests on each replica. The
rule (arithmetic in :mod:`fairgate.routing.share`):

    within-share request   keep r with within_share(r) < seats(r)
    borrower               keep r with max(in_flight, running + waiting)(r) < seats(r);
                           none: keep the r with the fewest borrowing(r) / seats(r)
    outside fair share     keep every replica

When no replica passes, every replica is kept and the scorers choose as they
would without the rule: the rule steers, it never refuses a request. A
replica outside fair share (no ``seats``) always passes.

Worked example, two replicas of 8 seats, organisation A's prompts home on e1:
e1 holds 8 of this gateway's within-share requests, e2 holds 3 and 3 borrowers.
A within-share request of A keeps only e2 (e1 drops), so prefix affinity, which
would send it to e1, chooses among [e2]; a borrower keeps e2 too (2 free seats).
With both full, a borrower keeps the replica with fewer borrowers per seat, so
every engine's queue holds borrowers of every organisation and the engine's
priority order (their ranks) decides who gets the next free seat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing.features import RequestFeatures
from fairgate.routing.share import borrower_load, fits_borrower

__all__ = ["FairShareFilter"]


@dataclass(frozen=True, slots=True)
class FairShareFilter:
    """Keeps the replicas with room for the request as fair share admitted it
    (``RequestFeatures.within_share``); a borrower with no free seat anywhere keeps
    the replicas with the fewest borrowers per seat; all of them when none has room
    or the request is outside fair share. No parameters."""

    name: ClassVar[str] = "fair-share"

    def filter(
        self, replicas: Sequence[ReplicaSnapshot], request: RequestFeatures
    ) -> list[ReplicaSnapshot]:
        within = request.within_share
        if within is None:
            return list(replicas)
        # fits_within_share / fits_borrower, written out: this runs for every request
        kept = (
            [r for r in replicas if (s := r.seats) is None or s - r.within_share > 0]
            if within
            else [r for r in replicas if fits_borrower(r)]
        )
        if kept:
            return kept
        if within or not replicas:
            return list(replicas)
        least = min(borrower_load(r) for r in replicas)
        return [r for r in replicas if r.seats is None or borrower_load(r) <= least]
