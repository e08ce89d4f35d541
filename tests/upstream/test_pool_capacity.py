"""A learned pool capacity applied: scraped loads in, reservations, seats, report and gauges out."""

from __future__ import annotations

import logging

import pytest

from fairgate.admin.fairshare import FairShareMonitor
from fairgate.engines import EngineLoad, adapter_for
from fairgate.fairshare import FairShare
from fairgate.fairshare.learned_capacity import CapacityLearner
from fairgate.observability.fairshare_metrics import FairShareMetrics
from fairgate.observability.metrics import GatewayMetrics
from fairgate.state import MemoryCounterStore
from fairgate.upstream import Breaker, Replica
from fairgate.upstream.pool_capacity import PoolCapacity
from store.backends import FakeClock


class World:
    """Pool p (C learned in 4..64, rises after 5 s) over replicas r0 and r1 of model m,
    next to pool q of fixed C = 8; shares A 0.75, B 0.25."""

    def __init__(self) -> None:
        self.clock = FakeClock(1000.0)
        self.replicas = [self._replica(name) for name in ("r0", "r1")]
        self.policy = FairShare({"p": 4, "q": 8}, {"p": {"A": 0.75, "B": 0.25}})
        learner = CapacityLearner(4, 64, rise_after=5.0, hold=3.0)
        self.follower = PoolCapacity(
            self.policy, {"p": (learner, self.replicas)}, clock=self.clock.monotonic
        )

    def _replica(self, name: str) -> Replica:
        return Replica(
            name,
            "m",
            f"http://10.0.0.{len(name)}:8000/{name}",
            1,
            None,
            adapter_for("vllm"),
            Breaker(),
            clock=lambda: self.clock.now,
        )

    def load(self, name: str, running: float, kv: float, preemptions: float = 0.0) -> None:
        replica = next(r for r in self.replicas if r.name == name)
        load = EngineLoad(running=running, waiting=0.0, kv_usage=kv, preemptions=preemptions)
        replica.record_load(load, fresh_for=3.0)

    def step(self, seconds: float = 1.0) -> None:
        self.clock.advance(seconds)
        self.follower.update()


def test_reservations_and_seats_follow_the_learned_capacity(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = World()
    w.follower.update()
    assert w.policy.capacity("p") == 4 and [r.seats for r in w.replicas] == [2.0, 2.0]
    caplog.set_level(logging.INFO, logger="fairgate.fairshare")
    for _ in range(6):
        w.load("r0", 18, 0.6)
        w.load("r1", 6, 0.5)
        w.step()
    assert w.policy.capacity("p") == 24
    assert dict(w.policy.reservations("p")) == {"A": 18, "B": 6}
    assert [r.seats for r in w.replicas] == [18.0, 6.0]
    assert w.policy.capacity("q") == 8  # a fixed pool is left alone
    [record] = [r for r in caplog.records if "capacity 4 -> 24" in r.getMessage()]
    assert "m/r0 rose 0 -> 18" in record.getMessage()
    assert "{'A': 18, 'B': 6}" in record.getMessage()
    # r1's KV cache is full at 5 running: 4 fit at KV 0.9, not 6.
    w.load("r0", 18, 0.6)
    w.load("r1", 5, 1.0, preemptions=3)
    w.step()
    assert w.policy.capacity("p") == 22
    assert dict(w.policy.reservations("p")) == {"A": 17, "B": 5}  # 16.5 / 5.5: A first by name
    # r0's health check fails: it drops out, its seats go.
    w.replicas[0].set_health(False)
    w.load("r1", 4, 0.5, preemptions=3)
    w.step()
    assert w.policy.capacity("p") == 4 and [r.seats for r in w.replicas] == [0.0, 4.0]


def test_a_replica_without_metrics_is_held_then_drops_out() -> None:
    w = World()
    for _ in range(6):
        w.load("r0", 10, 0.5)
        w.load("r1", 10, 0.5)
        w.step()
    assert w.policy.capacity("p") == 20
    w.load("r0", 10, 0.5)
    w.step(2.0)  # r1's load is 3 s old: stale, unknown
    assert w.policy.capacity("p") == 20
    w.load("r0", 10, 0.5)
    w.step(3.0)
    assert w.policy.capacity("p") == 10


async def test_the_report_and_the_gauges_show_the_learned_capacity() -> None:
    w = World()
    for _ in range(6):
        w.load("r0", 18, 0.6)
        w.load("r1", 6, 0.5)
        w.step()
    changed = w.clock.now
    w.step()
    monitor = FairShareMonitor(
        w.policy, MemoryCounterStore(), w.clock, lambda: {}, learned=w.follower.learned
    )
    report = await monitor.report()
    pools = {pool["pool"]: pool for pool in report["pools"]}
    assert pools["q"]["capacity_source"] == "config" and "capacity_learned" not in pools["q"]
    p = pools["p"]
    assert (p["capacity"], p["capacity_source"]) == (24, "auto")
    learned = p["capacity_learned"]
    assert (learned["floor"], learned["ceiling"]) == (4, 64)
    assert learned["replicas"] == {"m/r0": 18, "m/r1": 6}
    assert learned["changed_at"] == changed
    assert "m/r0 rose 0 -> 18" in learned["reason"]
    assert {row["org"]: row["reservation"] for row in p["orgs"]} == {"A": 18, "B": 6}

    registry = GatewayMetrics().registry
    metrics = FairShareMetrics(monitor, registry)
    assert await metrics.refresh()

    def gauge(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"fairgate_fairshare_{name}", labels)

    assert gauge("capacity", pool="p") == 24.0
    assert gauge("capacity_learned", pool="p") == 1.0 and gauge("capacity_learned", pool="q") == 0
    assert gauge("capacity_replica", pool="p", replica="m/r0") == 18.0
    assert gauge("capacity_changed_timestamp_seconds", pool="p") == changed
