"""Learned batch capacity: high-water mark, probe, reset, and convergence from a low start."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fairgate.admission import CapacityTracker
from fairgate.core.replica import ReplicaSnapshot


def seen(
    running: float | None, waiting: float | None = None, name: str = "r1"
) -> list[ReplicaSnapshot]:
    return [ReplicaSnapshot(name=name, model="m", running=running, waiting=waiting)]


def test_it_starts_at_the_initial_value_and_never_goes_below() -> None:
    tracker = CapacityTracker(initial=16)
    assert tracker.capacity("m/r1") == 16.0
    tracker.observe(seen(3, 0), now=0.0)
    assert tracker.capacity("m/r1") == 16.0
    assert tracker.capacities() == {"m/r1": 16.0}


def test_the_documented_example() -> None:
    tracker = CapacityTracker(initial=16)
    tracker.observe(seen(20, 3), now=0.0)
    assert tracker.capacity("m/r1") == 20.0  # the high-water mark; it queues, so no probe
    tracker.observe(seen(20, 0), now=1.0)
    assert tracker.capacity("m/r1") == 22.0  # full and nothing waiting: one probe step
    tracker.observe(seen(21, 0), now=2.0)
    assert tracker.capacity("m/r1") == 22.0  # no new evidence
    tracker.observe(seen(12, 5), now=3.0)
    assert tracker.capacity("m/r1") == 22.0  # a passing queue never lowers it


def test_without_the_probe_it_is_the_plain_high_water_mark() -> None:
    tracker = CapacityTracker(initial=4, probe_fraction=0.0)
    for running in (4, 9, 7):
        tracker.observe(seen(running, 0), now=0.0)
    assert tracker.capacity("m/r1") == 9.0


def test_an_engine_whose_metrics_disappear_long_enough_is_relearned() -> None:
    tracker = CapacityTracker(initial=8, reset_after=60.0, probe_fraction=0.0)
    tracker.observe(seen(40, 2), now=0.0)
    tracker.observe(seen(None), now=59.0)
    assert tracker.capacity("m/r1") == 40.0  # a scrape or two missed: kept
    tracker.observe(seen(None), now=60.0)
    assert tracker.capacity("m/r1") == 8.0  # gone for a restart's worth of time: forgotten
    tracker.observe(seen(12, 1), now=61.0)
    assert tracker.capacity("m/r1") == 12.0


def test_replicas_absent_long_enough_are_dropped() -> None:
    tracker = CapacityTracker(initial=8, reset_after=10.0)
    tracker.observe(seen(9, 1, "old") + seen(9, 1, "new"), now=0.0)
    tracker.observe(seen(9, 1, "new"), now=5.0)
    assert set(tracker.capacities()) == {"m/old", "m/new"}
    tracker.observe(seen(9, 1, "new"), now=10.0)
    assert set(tracker.capacities()) == {"m/new"}


def test_the_probe_finds_a_batch_larger_than_the_initial_guess() -> None:
    # An engine that runs 40 at once. The gateway fills up to the learned capacity
    # (a band at ceiling 1.0 under load), and the engine's metrics are read back.
    true_batch = 40
    tracker = CapacityTracker(initial=8)
    history = []
    for step in range(60):
        in_flight = math.ceil(tracker.capacity("m/r1"))
        running, waiting = min(in_flight, true_batch), max(0, in_flight - true_batch)
        tracker.observe(seen(running, waiting), now=float(step))
        history.append(tracker.capacity("m/r1"))
    assert history == sorted(history)  # only ever upwards
    assert true_batch <= history[-1] <= true_batch + math.ceil(true_batch / 16)
    assert history[-1] == history[-10]  # and then it stays


@pytest.mark.parametrize(
    "options",
    [{"initial": 0}, {"initial": 1, "reset_after": 0.0}, {"initial": 1, "probe_fraction": 2.0}],
)
def test_parameters_out_of_range_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CapacityTracker(**options)


def test_replicas_may_start_from_their_own_estimate() -> None:
    tracker = CapacityTracker(initial=8, initial_by_replica={"m/big": 96}, reset_after=5.0)
    assert tracker.capacity("m/big") == 96.0 and tracker.capacity("m/r1") == 8.0
    tracker.observe(seen(None, name="big") + seen(3, 0), now=0.0)
    assert tracker.capacities() == {"m/big": 96.0, "m/r1": 8.0}
    tracker.observe(seen(100, 4, name="big"), now=1.0)
    tracker.observe(seen(None, name="big"), now=6.0)
    assert tracker.capacity("m/big") == 96.0  # forgotten back to its own start
    with pytest.raises(ValueError, match="m/big"):
        CapacityTracker(initial=8, initial_by_replica={"m/big": 0})


def test_starting_capacities_split_the_pool_by_weight_unless_the_operator_fixed_one() -> None:
    from fairgate.admission.capacity import starting_capacities

    replicas = [("a:1", 3.0), ("b:1", 1.0)]
    assert starting_capacities(replicas, pool_start=16, fixed=None) == {"a:1": 12.0, "b:1": 4.0}
    # never below one request, whatever the weights
    assert starting_capacities(replicas, pool_start=2, fixed=None) == {"a:1": 1.5, "b:1": 1.0}
    assert starting_capacities(replicas, pool_start=16, fixed=5) == {"a:1": 5, "b:1": 5}
    assert starting_capacities(replicas, pool_start=None, fixed=None) == {"a:1": 1.0, "b:1": 1.0}
