"""The capacity learner: C from running counts, KV use and preemptions, with hysteresis."""

from __future__ import annotations

import pytest

from fairgate.fairshare import FairShare
from fairgate.fairshare.learned_capacity import CapacityLearner, Learned, Reading


def at(learner: CapacityLearner, now: float, *readings: Reading) -> Learned:
    return learner.observe(readings, now)


def r(
    replica: str, running: float | None, kv: float | None = 0.5, preempted: float = 0, **kw: bool
) -> Reading:
    return Reading(replica, running=running, kv_usage=kv, preemptions=preempted, **kw)


def test_the_worked_example_of_the_module() -> None:
    learner = CapacityLearner(8, 64, kv_limit=0.9, rise_after=10.0)
    assert at(learner, 0, r("r0", 12, 0.50), r("r1", 10, 0.40)).capacity == 8
    assert at(learner, 5, r("r0", 14, 0.55), r("r1", 11, 0.45)).capacity == 8
    risen = at(learner, 10, r("r0", 13, 0.52), r("r1", 12, 0.48))
    assert (risen.capacity, dict(risen.replicas)) == (22, {"r0": 12, "r1": 10})
    assert risen.changed_at == 10
    assert risen.reason is not None and "r0 rose 0 -> 12" in risen.reason
    fallen = at(learner, 11, r("r0", 11, 0.99), r("r1", 12, 0.48))
    assert (fallen.capacity, fallen.replicas["r0"]) == (20, 10)
    assert fallen.reason is not None and "r0 fell 12 -> 10: KV 0.99 over 0.9" in fallen.reason
    gone = at(learner, 12, r("r0", 11, 0.85), r("r1", 12, 0.48, healthy=False))
    assert (gone.capacity, dict(gone.replicas)) == (10, {"r0": 10})
    assert gone.reason is not None and "r1 is unhealthy" in gone.reason
    back = at(learner, 13, r("r0", 11, 0.85), r("r1", 4, 0.2))
    assert (back.capacity, dict(back.replicas)) == (10, {"r0": 10, "r1": 0})


def test_a_rise_needs_evidence_sustained_for_rise_after() -> None:
    learner = CapacityLearner(1, 100, rise_after=10.0)
    at(learner, 0, r("a", 20))
    at(learner, 9, r("a", 30))
    assert learner.learned.replicas["a"] == 0  # 9 s of evidence is not enough
    # Light load between two readings is no evidence either way; the value rises to the
    # lowest reading of the streak, not the highest.
    at(learner, 10, r("a", 0, 0.0))
    assert at(learner, 11, r("a", 25)).replicas["a"] == 20
    # A full reading that shows the value is what fits stops the next rise.
    at(learner, 12, r("a", 30))
    at(learner, 20, r("a", 22, 0.99, preempted=4))  # ⌊22 · 0.9 / 0.99⌋ = 20
    assert at(learner, 23, r("a", 30, preempted=4)).replicas["a"] == 20
    assert at(learner, 33, r("a", 30, preempted=4)).replicas["a"] == 30


def test_light_load_never_lowers_the_value() -> None:
    learner = CapacityLearner(1, 100, rise_after=0.0)
    assert at(learner, 0, r("a", 30)).capacity == 30
    assert at(learner, 1, r("a", 2, 0.05)).capacity == 30
    assert at(learner, 2, r("a", 0, 0.0)).capacity == 30


def test_a_full_kv_cache_lowers_the_value_at_once() -> None:
    learner = CapacityLearner(1, 100, rise_after=0.0)
    at(learner, 0, r("a", 30, 0.6))
    learned = at(learner, 1, r("a", 22, 0.99, preempted=9))
    assert learned.capacity == 20  # ⌊22 · 0.9 / 0.99⌋
    assert learned.reason == "a fell 30 -> 20: KV 0.99 over 0.9 at 22 running"


def test_a_preemption_read_with_little_kv_in_use_lowers_nothing() -> None:
    # The engine overflowed between two scrapes and has drained since: the running
    # count read now is not the one it preempted at.
    learner = CapacityLearner(1, 100, rise_after=0.0)
    at(learner, 0, r("a", 30, 0.6, preempted=5))
    assert at(learner, 1, r("a", 3, 0.1, preempted=9)).capacity == 30
    # Nor is it evidence to rise.
    assert at(learner, 2, r("a", 40, 0.8, preempted=12)).capacity == 30
    assert at(learner, 3, r("a", 40, 0.8, preempted=12)).capacity == 40


def test_an_engine_without_kv_use_is_lowered_by_its_preemptions() -> None:
    learner = CapacityLearner(1, 100, rise_after=0.0)
    at(learner, 0, r("a", 20, None))
    learned = at(learner, 1, r("a", 16, None, preempted=2))
    assert learned.capacity == 16
    assert learned.reason == "a fell 20 -> 16: preempted at 16 running (no KV metric)"


def test_full_readings_above_the_value_do_not_lower_it() -> None:
    # Borrowers fill an engine past C: a full cache at more than C running is no
    # evidence that C is too high.
    learner = CapacityLearner(1, 100, rise_after=0.0)
    at(learner, 0, r("a", 20, 0.5))
    assert at(learner, 1, r("a", 30, 0.92, preempted=3)).capacity == 29  # ⌊30·0.9/0.92⌋
    assert at(learner, 2, r("a", 33, 1.0, preempted=6)).capacity == 29


def test_a_saturated_engine_is_learned_from_its_full_readings() -> None:
    # KV always over the limit and preemptions at every scrape: what fits at the KV
    # limit, sustained.
    learner = CapacityLearner(1, 100, rise_after=10.0)
    for t, running in enumerate([33, 31, 32, 34, 33, 32, 31, 33, 32, 33, 34]):
        learned = at(learner, t, r("a", running, 0.99, preempted=t))
    assert learned.capacity == 28  # ⌊31 · 0.9 / 0.99⌋, the lowest of the streak


def test_floor_and_ceiling_bound_c_not_the_replica_values() -> None:
    learner = CapacityLearner(10, 40, rise_after=0.0)
    assert at(learner, 0).capacity == 10
    low = at(learner, 1, r("a", 3), r("b", 4))
    assert (low.capacity, dict(low.replicas)) == (10, {"a": 3, "b": 4})
    high = at(learner, 2, r("a", 30), r("b", 25))
    assert (high.capacity, dict(high.replicas)) == (40, {"a": 30, "b": 25})
    # Seats follow the replicas' values, scaled to C.
    assert high.seats({"a": 1, "b": 1}) == pytest.approx({"a": 40 * 30 / 55, "b": 40 * 25 / 55})


def test_a_replica_joining_adds_to_c_and_leaving_takes_its_part_away() -> None:
    learner = CapacityLearner(1, 100, rise_after=5.0)
    at(learner, 0, r("a", 12))
    assert at(learner, 5, r("a", 12)).capacity == 12
    joined = at(learner, 6, r("a", 12), r("b", 9))
    assert joined.capacity == 12 and joined.replicas["b"] == 0  # b has no evidence yet
    assert at(learner, 11, r("a", 12), r("b", 9)).capacity == 21
    left = at(learner, 12, r("a", 12))  # b is no longer listed
    assert (left.capacity, dict(left.replicas)) == (12, {"a": 12})
    assert left.reason == "b is no longer listed: drops out with 9"


def test_unknown_metrics_are_held_for_hold_seconds_then_the_replica_drops_out() -> None:
    learner = CapacityLearner(1, 100, rise_after=0.0, hold=3.0)
    at(learner, 0, r("a", 12), r("b", 8))
    assert at(learner, 1, r("a", 12), r("b", None)).capacity == 20  # one failed scrape
    assert at(learner, 3, r("a", 12), r("b", None)).capacity == 20
    gone = at(learner, 4, r("a", 12), r("b", None))
    assert gone.capacity == 12
    assert gone.reason == "b has had no metrics for 3s: drops out with 8"


def test_a_restarted_engine_with_a_smaller_cache_is_learned_again() -> None:
    learner = CapacityLearner(1, 100, rise_after=5.0)
    at(learner, 0, r("a", 30, preempted=40))
    assert at(learner, 5, r("a", 30, preempted=40)).capacity == 30
    # Restarted between two scrapes: the counter went back to 0.
    restarted = at(learner, 6, r("a", 14, 0.6, preempted=0))
    assert restarted.capacity == 1
    assert restarted.reason is not None and "a restarted" in restarted.reason
    assert at(learner, 11, r("a", 15, 0.7, preempted=0)).capacity == 14


def test_seats_by_weight_while_nothing_is_learned() -> None:
    learner = CapacityLearner(12, 100)
    assert at(learner, 0).seats({"a": 1, "b": 2}) == {"a": 4.0, "b": 8.0}
    # Only replicas taking part get seats; one that dropped out gets none.
    learned = at(learner, 1, r("a", 0))
    assert learned.seats({"a": 1, "b": 2}) == {"a": 12.0, "b": 0.0}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((0, 10), {}), ((5, 4), {}), ((1, 4), {"kv_limit": 0.0}), ((1, 4), {"rise_after": -1})],
)
def test_parameters_out_of_range_are_refused(
    args: tuple[int, int], kwargs: dict[str, float]
) -> None:
    with pytest.raises(ValueError):
        CapacityLearner(*args, **kwargs)


def test_reservations_follow_a_new_capacity() -> None:
    policy = FairShare({"p": 16}, {"p": {"A": 0.75, "B": 0.25}})
    assert dict(policy.reservations("p")) == {"A": 12, "B": 4}
    assert policy.set_capacity("p", 10) is True
    assert (policy.capacity("p"), dict(policy.reservations("p"))) == (10, {"A": 8, "B": 2})
    assert policy.set_capacity("p", 10) is False
    with pytest.raises(KeyError):
        policy.set_capacity("other", 4)


def test_team_sub_reservations_follow_a_new_capacity() -> None:
    policy = FairShare(
        {"p": 20}, {"p": {"A": 0.5, "B": 0.5}}, team_shares={"A": {"t1": 0.7, "t2": 0.3}}
    )
    before = dict(policy.team_reservations("p", "A"))
    assert policy.set_capacity("p", 40)
    after = dict(policy.team_reservations("p", "A"))
    assert sum(before.values()) == 10 and sum(after.values()) == 20
    assert (after["t1"], after["t2"]) == (14, 6)
