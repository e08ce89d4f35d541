"""Pool saturation: the worked examples of the formula, and what is left out of it."""

from __future__ import annotations

import math

import pytest

from fairgate.admission import replica_key, saturation
from fairgate.core.replica import ReplicaSnapshot


def replica(name: str, **fields: object) -> ReplicaSnapshot:
    return ReplicaSnapshot(name=name, model="llama", **fields)  # type: ignore[arg-type]


def test_the_documented_example() -> None:
    replicas = [
        replica("gpu01", in_flight=40, kv_usage=0.5),
        replica("gpu02", in_flight=8, kv_usage=0.9),
    ]
    capacity = {"llama/gpu01": 32.0, "llama/gpu02": 32.0}
    assert saturation(replicas, capacity, 4) == pytest.approx(52 / 64)  # queue part wins
    # with every batch slot still free, the KV part decides: (0.5 + 0.9) / 2 / 0.9
    idle = [replica("gpu01", kv_usage=0.5), replica("gpu02", kv_usage=0.9)]
    assert saturation(idle, capacity, 0) == pytest.approx(0.7 / 0.9)


def test_one_means_full_batches_and_above_one_counts_what_engines_queue() -> None:
    capacity = {"llama/a": 16.0}
    assert saturation([replica("a", in_flight=16)], capacity, 0) == 1.0
    # 24 in flight on 16 slots: 8 queued in the engine = 1 + 8 / 16
    assert saturation([replica("a", in_flight=20)], capacity, 4) == 1.5


def test_pending_leases_count_like_requests_in_flight() -> None:
    capacity = {"llama/a": 10.0}
    assert saturation([replica("a", in_flight=3)], capacity, 2) == 0.5
    assert saturation([replica("a")], capacity, 10) == 1.0


def test_kv_usage_is_weighted_by_capacity_and_unknown_kv_is_left_out() -> None:
    replicas = [replica("big", kv_usage=0.9), replica("small", kv_usage=0.0), replica("dark")]
    capacity = {"llama/big": 30.0, "llama/small": 10.0, "llama/dark": 60.0}
    # (30·0.9 + 10·0) / 40 = 0.675; the replica without metrics counts only in the queue part
    assert saturation(replicas, capacity, 0, kv_limit=0.9) == pytest.approx(0.675 / 0.9)


def test_without_any_engine_metric_the_gateways_count_decides() -> None:
    replicas = [replica("a", in_flight=5), replica("b", in_flight=1)]
    assert saturation(replicas, {"llama/a": 4.0, "llama/b": 4.0}, 0) == 0.75


def test_replicas_that_cannot_take_traffic_do_not_count() -> None:
    capacity = {"llama/up": 10.0, "llama/sick": 10.0, "llama/tripped": 10.0}
    replicas = [
        replica("up", in_flight=5),
        replica("sick", healthy=False, in_flight=0, kv_usage=1.0),
        replica("tripped", breaker_open=True, in_flight=0),
    ]
    assert saturation(replicas, capacity, 0) == 0.5
    assert saturation(replicas[1:], capacity, 0) == math.inf
    assert saturation([], capacity, 0) == math.inf


def test_a_replica_without_a_learned_capacity_counts_the_default() -> None:
    assert saturation([replica("new", in_flight=2)], {}, 0) == 2.0
    assert saturation([replica("new", in_flight=2)], {}, 0, default_capacity=8.0) == 0.25


def test_kv_usage_outside_zero_to_one_is_clamped() -> None:
    assert saturation([replica("a", kv_usage=1.7)], {"llama/a": 1.0}, 0, kv_limit=0.5) == 2.0


def test_replica_keys_tell_models_apart() -> None:
    assert replica_key(ReplicaSnapshot(name="gpu01", model="m1")) != replica_key(
        ReplicaSnapshot(name="gpu01", model="m2")
    )


@pytest.mark.parametrize(
    ("pending", "capacity", "kv_limit"),
    [(-1, 1.0, 0.9), (0, 0.0, 0.9), (0, 1.0, 0.0), (0, 1.0, 1.1)],
)
def test_values_out_of_range_are_refused(pending: int, capacity: float, kv_limit: float) -> None:
    with pytest.raises(ValueError):
        saturation([replica("a")], {"llama/a": capacity}, pending, kv_limit=kv_limit)
