"""What the controller tests drive it with: a clock, a pool load and an observer they control.

These are real collaborators, not mocks: the controller reads time from the
clock and saturation from the load exactly as it does from a ``SystemClock`` and
a ``SaturationDetector`` in the gateway.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

from fairgate.admission import AdmissionController, Bands, Lease, Rejection

PRODUCT_BANDS = (("platinum", 1.5), ("gold", 1.0), ("bronze", 0.8))


class ManualClock:
    """Time that moves only when a test says so."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class PoolLoad:
    """A pool of ``capacity`` batch slots with ``in_flight`` requests dispatched to it.

    As a saturation function it is the queue part of ``admission.saturation``
    for one replica: (in flight + pending) / capacity.
    """

    capacity: float = 10.0
    in_flight: int = 0
    readings: int = 0

    def __call__(self, pending: int) -> float:
        self.readings += 1
        return (self.in_flight + pending) / self.capacity

    def start(self, lease: Lease) -> None:
        """The request reached a replica."""
        self.in_flight += 1
        lease.dispatched()

    def finish(self, lease: Lease) -> None:
        """The request is over."""
        self.in_flight -= 1
        lease.release()


@dataclass
class RecordingObserver:
    """Keeps every measurement the controller reports."""

    depths: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    grants: list[tuple[str, float]] = field(default_factory=list)
    rejections: Counter[tuple[str, Rejection]] = field(default_factory=Counter)
    saturations: list[float] = field(default_factory=list)

    def queue_depth(self, pool: str, band: str, depth: int) -> None:
        self.depths.setdefault((pool, band), []).append(depth)

    def admitted(self, pool: str, band: str, waited: float) -> None:
        self.grants.append((band, waited))

    def rejected(self, pool: str, band: str, reason: Rejection) -> None:
        self.rejections[(band, reason)] += 1

    def saturation(self, pool: str, value: float) -> None:
        self.saturations.append(value)


def admit_now(coro: Coroutine[Any, Any, Lease]) -> Lease:
    """Run ``admit(...)`` and require that it finishes without ever suspending."""
    try:
        coro.send(None)
    except StopIteration as done:
        lease: Lease = done.value
        return lease
    coro.close()
    raise AssertionError("admit() suspended: the request was queued")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def load() -> PoolLoad:
    return PoolLoad()


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def controller(
    clock: ManualClock, load: PoolLoad, observer: RecordingObserver
) -> AdmissionController:
    return AdmissionController(
        "b300",
        Bands(PRODUCT_BANDS),
        queue_size=1000,
        queue_ttl=30.0,
        clock=clock,
        saturation_fn=load,
        observer=observer,
    )
