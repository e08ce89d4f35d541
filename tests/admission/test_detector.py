"""The saturation detector: live snapshots through the tracker into one reading."""

from __future__ import annotations

import pytest

from fairgate.admission import CapacityTracker, SaturationDetector
from fairgate.core.replica import ReplicaSnapshot

from .conftest import ManualClock


def test_each_reading_takes_fresh_snapshots_and_learns_from_them() -> None:
    replicas = [ReplicaSnapshot(name="r1", model="m", in_flight=4, running=4, waiting=0)]
    clock = ManualClock()
    tracker = CapacityTracker(initial=8, probe_fraction=0.0)
    detector = SaturationDetector(lambda: replicas, tracker, clock)
    assert detector(0) == 0.5
    assert detector(4) == 1.0
    # the engine turns out to run 16 at once: the next reading knows it
    replicas[0] = ReplicaSnapshot(name="r1", model="m", in_flight=16, running=16, waiting=2)
    assert detector(0) == 1.0
    assert tracker.capacity("m/r1") == 16.0


def test_the_kv_limit_sets_where_kv_occupancy_counts_as_full() -> None:
    replicas = [ReplicaSnapshot(name="r1", model="m", kv_usage=0.6)]
    tracker = CapacityTracker(initial=8)
    assert SaturationDetector(lambda: replicas, tracker, ManualClock())(0) == pytest.approx(
        0.6 / 0.9
    )
    strict = SaturationDetector(lambda: replicas, tracker, ManualClock(), kv_limit=0.6)
    assert strict(0) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        SaturationDetector(lambda: replicas, tracker, ManualClock(), kv_limit=0.0)


def test_an_unknown_replica_counts_the_initial_capacity() -> None:
    replicas = [ReplicaSnapshot(name="r1", model="m", in_flight=3)]
    detector = SaturationDetector(lambda: replicas, CapacityTracker(initial=12), ManualClock())
    assert detector(0) == 0.25
