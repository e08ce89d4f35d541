"""Picking a replica: least in flight, weight, round-robin, and what is skipped."""

from __future__ import annotations

from collections import Counter

import pytest

from fairgate.engines import adapter_for
from fairgate.upstream import Breaker, Replica, ReplicaRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _replica(name: str, weight: int = 1, model: str = "m", clock: Clock | None = None) -> Replica:
    breaker = Breaker(failures=1, backoff_initial=10.0, backoff_max=10.0, clock=clock or Clock())
    return Replica(name, model, f"http://{name}:8000", weight, None, adapter_for("vllm"), breaker)


def test_least_in_flight_wins() -> None:
    a, b, c = _replica("a"), _replica("b"), _replica("c")
    a.in_flight, b.in_flight, c.in_flight = 3, 1, 2
    assert ReplicaRegistry([a, b, c]).pick("m") is b


def test_ties_go_to_the_larger_weight() -> None:
    a, b = _replica("a", weight=1), _replica("b", weight=3)
    registry = ReplicaRegistry([a, b])
    assert [registry.pick("m") for _ in range(4)] == [b, b, b, b]
    b.in_flight = 1
    assert registry.pick("m") is a


def test_full_ties_rotate() -> None:
    replicas = [_replica(n) for n in "abc"]
    registry = ReplicaRegistry(replicas)
    picks = [registry.pick("m") for _ in range(9)]
    assert Counter(r.name for r in picks if r) == {"a": 3, "b": 3, "c": 3}
    assert picks[0] is not picks[1]


def test_leases_spread_concurrent_requests() -> None:
    replicas = [_replica(n) for n in "ab"]
    registry = ReplicaRegistry(replicas)
    held = []
    for _ in range(6):
        replica = registry.pick("m")
        assert replica is not None
        registry.acquire(replica)
        held.append(replica)
    assert [r.in_flight for r in replicas] == [3, 3]
    for replica in held:
        registry.release(replica)
    assert [r.in_flight for r in replicas] == [0, 0]


def test_excluded_unhealthy_and_open_are_skipped() -> None:
    a, b, c = _replica("a"), _replica("b"), _replica("c")
    a.in_flight, b.in_flight, c.in_flight = 0, 1, 2
    registry = ReplicaRegistry([a, b, c])
    assert registry.pick("m", exclude={"a"}) is b
    b.set_health(False)
    assert registry.pick("m", exclude={"a"}) is c
    c.breaker.failure()
    assert registry.pick("m", exclude={"a"}) is None
    assert registry.pick("m") is a


def test_an_elapsed_breaker_gives_its_probe_to_one_request_only() -> None:
    clock = Clock()
    a, b = _replica("a", clock=clock), _replica("b", clock=clock)
    b.in_flight = 5
    registry = ReplicaRegistry([a, b])
    a.breaker.failure()
    assert registry.pick("m") is b
    clock.now += 10.0
    assert registry.pick("m") is a  # the probe
    assert a.breaker.state == "half_open"
    assert registry.pick("m") is b  # no second probe
    a.breaker.success()
    assert registry.pick("m") is a


def test_allow_is_asked_only_of_the_chosen_replica() -> None:
    clock = Clock()
    a, b = _replica("a", clock=clock), _replica("b", clock=clock)
    a.breaker.failure()
    b.breaker.failure()
    clock.now += 10.0
    registry = ReplicaRegistry([a, b])
    chosen = registry.pick("m")
    other = b if chosen is a else a
    assert chosen is not None
    assert chosen.breaker.state == "half_open"
    assert other.breaker.state == "open"  # its probe slot is still free


def test_lease_counts_and_releases_on_error() -> None:
    a = _replica("a")
    registry = ReplicaRegistry([a])
    with pytest.raises(RuntimeError), registry.lease(a):
        assert a.in_flight == 1
        raise RuntimeError("upstream broke")
    assert a.in_flight == 0
    registry.release(a)  # an extra release never goes negative
    assert a.in_flight == 0


def test_models_are_kept_apart() -> None:
    x, y = _replica("gpu01", model="x"), _replica("gpu01", model="y")
    registry = ReplicaRegistry([x, y])
    assert registry.pick("x") is x
    assert registry.pick("y") is y
    assert registry.pick("z") is None
    assert registry.replicas("z") == ()
    assert list(registry.models()) == ["x", "y"]
    assert [s.name for s in registry.snapshots("x")] == ["gpu01"]


def test_duplicate_replica_names_in_a_model_are_refused() -> None:
    with pytest.raises(ValueError):
        ReplicaRegistry([_replica("a"), _replica("a")])


def test_ready_needs_one_healthy_replica_with_a_closed_breaker() -> None:
    a, b = _replica("a", model="x"), _replica("b", model="y")
    registry = ReplicaRegistry([a, b])
    assert registry.ready() == {"x": True, "y": True}
    a.set_health(False)
    b.breaker.failure()
    assert registry.ready() == {"x": False, "y": False}
