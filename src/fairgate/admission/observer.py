"""What admission reports, as callbacks: no metrics library is imported here.

The observability layer implements ``AdmissionObserver`` (Prometheus gauges,
histograms and counters, label children cached per pool and band) and hands
it to each ``AdmissionController``; ``NullObserver`` is the default.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

__all__ = ["AdmissionObserver", "NullObserver", "Rejection"]


class Rejection(StrEnum):
    """Why a request left admission without a lease (the ``reason`` label)."""

    QUEUE_FULL = "queue_full"
    """Its band's queue held ``queue_size`` waiters already: 503."""
    QUEUE_TIMEOUT = "queue_timeout"
    """It waited ``queue_ttl`` without being admitted: 504."""
    CANCELLED = "cancelled"
    """The caller went away (client disconnect) while it waited."""


class AdmissionObserver(Protocol):
    """Receives admission's measurements. Every method is called on the event loop,
    synchronously, O(1) per call, and must not raise or block.

    - ``queue_depth(pool, band, depth)``: the band's waiters (>= 0), after each change;
    - ``admitted(pool, band, waited)``: a lease granted after ``waited`` seconds
      (0.0 when admitted at once);
    - ``rejected(pool, band, reason)``: a request refused or abandoned, by ``Rejection``;
    - ``saturation(pool, value)``: each saturation reading (>= 0, ``inf`` with no
      replica able to take traffic).
    """

    def queue_depth(self, pool: str, band: str, depth: int) -> None: ...

    def admitted(self, pool: str, band: str, waited: float) -> None: ...

    def rejected(self, pool: str, band: str, reason: Rejection) -> None: ...

    def saturation(self, pool: str, value: float) -> None: ...


class NullObserver:
    """Discards every measurement."""

    def queue_depth(self, pool: str, band: str, depth: int) -> None:
        pass

    def admitted(self, pool: str, band: str, waited: float) -> None:
        pass

    def rejected(self, pool: str, band: str, reason: Rejection) -> None:
        pass

    def saturation(self, pool: str, value: float) -> None:
        pass
