"""Picking a replica: the model's routing strategy over live replicas, and what is never picked."""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest

from fairgate.engines import EngineLoad, adapter_for
from fairgate.routing import Decision, build_strategy, prefix_hashes
from fairgate.upstream import Breaker, Replica, ReplicaRegistry

LEAST_BUSY = build_strategy("least-busy", {"scorers": {"in-flight": 1}})
HEAVIEST = build_strategy("heaviest", {"scorers": {"weight": 1}})
TURNS = build_strategy("turns", {"scorers": {"in-flight": 1}, "picker": "round-robin"})
NO_FILTERS = build_strategy("bare", {"filters": [], "scorers": {"in-flight": 1}})


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _replica(name: str, weight: int = 1, model: str = "m", clock: Clock | None = None) -> Replica:
    clock = clock or Clock()
    breaker = Breaker(failures=1, backoff_initial=10.0, backoff_max=10.0, clock=clock)
    return Replica(
        name, model, f"http://{name}:8000", weight, None, adapter_for("vllm"), breaker, clock=clock
    )


def _registry(replicas: list[Replica], **kwargs: object) -> ReplicaRegistry:
    return ReplicaRegistry(replicas, rng=random.Random(0), **kwargs)  # type: ignore[arg-type]


def test_the_models_strategy_decides() -> None:
    a, b, c = _replica("a"), _replica("b", weight=3), _replica("c")
    a.in_flight, b.in_flight, c.in_flight = 3, 4, 1
    assert _registry([a, b, c], strategies={"m": LEAST_BUSY}).pick("m") is c
    assert _registry([a, b, c], strategies={"m": HEAVIEST}).pick("m") is b
    b.in_flight = 2  # in flight per unit of weight: 2/3 is less busy than 1/1
    assert _registry([a, b, c], strategies={"m": LEAST_BUSY}).pick("m") is b


def test_scraped_load_counts_and_stale_load_does_not() -> None:
    clock = Clock()
    a, b = _replica("a", clock=clock), _replica("b", clock=clock)
    queue_first = build_strategy("q", {"scorers": {"queue-depth": 1}})
    registry = _registry([a, b], strategies={"m": queue_first})
    a.record_load(EngineLoad(running=8, waiting=12, kv_usage=0.5), fresh_for=3.0)
    b.record_load(EngineLoad(running=2, waiting=0, kv_usage=0.1), fresh_for=3.0)
    assert {registry.pick("m") for _ in range(5)} == {b}
    clock.now += 5.0  # both readings are stale now: unknown, a tie again
    assert {registry.pick("m") for _ in range(40)} == {a, b}


def test_the_round_robin_cursor_is_kept_per_model() -> None:
    x = [_replica(n, model="x") for n in "abc"]
    y = [_replica(n, model="y") for n in "ab"]
    registry = _registry(x + y, strategies={"x": TURNS, "y": TURNS})
    assert [registry.pick("x").name for _ in range(4)] == ["a", "b", "c", "a"]  # type: ignore[union-attr]
    assert [registry.pick("y").name for _ in range(3)] == ["a", "b", "a"]  # type: ignore[union-attr]
    assert registry.pick("x").name == "b"  # type: ignore[union-attr]


def test_a_model_without_a_strategy_routes_with_chat() -> None:
    registry = _registry([_replica("a"), _replica("b")])
    strategy = registry.strategy("m")
    assert strategy is not None and strategy.name == "chat"
    assert registry.uses_prefix("m")
    assert registry.strategy("unknown") is None
    assert not registry.uses_prefix("unknown")
    assert not _registry([_replica("a")], strategies={"m": LEAST_BUSY}).uses_prefix("m")


def test_a_session_stays_home_until_its_home_is_over_its_bound() -> None:
    replicas = [_replica(n) for n in ("a", "b")]
    registry = _registry(replicas)
    home = registry.pick("m", session="conversation-7")
    assert home is not None
    assert {registry.pick("m", session="conversation-7") for _ in range(10)} == {home}
    # Concurrent requests of the session: ceil(1.25 · (L + 1) / 2) in flight at most.
    placed = []
    for _ in range(3):
        replica = registry.pick("m", session="conversation-7")
        assert replica is not None
        registry.acquire(replica)
        placed.append(replica)
    other = next(r for r in replicas if r is not home)
    assert placed == [home, home, other]
    for replica in placed:
        registry.release(replica)
    assert registry.pick("m", session="conversation-7") is home


def test_sessions_spread_over_the_replicas() -> None:
    registry = _registry([_replica(n) for n in "abcd"])
    homes = Counter(registry.pick("m", session=f"user-{i}").name for i in range(400))  # type: ignore[union-attr]
    assert set(homes) == set("abcd")
    assert min(homes.values()) >= 50


def test_a_shared_prefix_follows_the_replica_that_served_it() -> None:
    registry = _registry([_replica(n) for n in "abcd"])
    system = "You are a careful assistant. " * 40
    first = registry.pick("m", session="s-0", prefix=prefix_hashes(system + "question 0"))
    assert first is not None
    # Other sessions (their own homes) with the same system prompt: where it is cached.
    chosen = {
        registry.pick("m", session=f"s-{n}", prefix=prefix_hashes(system + f"question {n}"))
        for n in range(1, 30)
    }
    assert chosen == {first}
    assert len({registry.pick("m", session=f"s-{n}") for n in range(30)}) > 1  # no prefix


def test_a_replica_that_left_routing_comes_back_holding_no_prefix() -> None:
    # A placed replica's name is its model, node and port: the engine started again
    # there after a crash or a drain has an empty cache, whatever it served before.
    decisions: list[Decision] = []
    registry = _registry([_replica(n) for n in "abcd"], on_decision=decisions.append)
    prompt = prefix_hashes("You are a careful assistant. " * 40)
    first = registry.pick("m", session="s-0", prefix=prompt)
    assert first is not None
    registry.remove("m", first.name)
    registry.add(_replica(first.name))
    registry.pick("m", session="s-1", prefix=prompt)
    assert decisions[-1].scores["prefix-affinity"][first.name] == 0.0


def test_excluded_unhealthy_and_open_are_skipped() -> None:
    a, b, c = _replica("a"), _replica("b"), _replica("c")
    a.in_flight, b.in_flight, c.in_flight = 0, 1, 2
    registry = _registry([a, b, c], strategies={"m": LEAST_BUSY})
    assert registry.pick("m", exclude={"a"}) is b
    b.set_health(False)
    assert registry.pick("m", exclude={"a"}) is c
    c.breaker.failure()
    assert registry.pick("m", exclude={"a"}) is None
    assert registry.pick("m", {"b"}) is a  # positional, as before routing
    assert registry.pick("m") is a


def test_an_open_breaker_refuses_even_without_the_filter() -> None:
    a, b = _replica("a"), _replica("b")
    b.in_flight = 5
    a.breaker.failure()
    registry = _registry([a, b], strategies={"m": NO_FILTERS})
    assert registry.pick("m") is b  # routing chose a, its breaker said no: routed again
    assert registry.pick("m", exclude={"b"}) is None


def test_an_elapsed_breaker_gives_its_probe_to_one_request_only() -> None:
    clock = Clock()
    a, b = _replica("a", clock=clock), _replica("b", clock=clock)
    b.in_flight = 5
    registry = _registry([a, b], strategies={"m": LEAST_BUSY})
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
    registry = _registry([a, b])
    chosen = registry.pick("m")
    other = b if chosen is a else a
    assert chosen is not None
    assert chosen.breaker.state == "half_open"
    assert other.breaker.state == "open"  # its probe slot is still free


def test_every_decision_is_reported_with_its_rationale() -> None:
    a, b = _replica("a"), _replica("b")
    b.set_health(False)
    seen: list[Decision] = []
    registry = _registry([a, b], strategies={"m": LEAST_BUSY}, on_decision=seen.append)
    assert registry.pick("m") is a
    assert registry.pick("m", exclude={"a"}) is None
    assert [(d.model, d.strategy, d.replica) for d in seen] == [
        ("m", "least-busy", "a"),
        ("m", "least-busy", None),
    ]
    assert seen[0].dropped_by("healthy") == ("b",)
    assert seen[0].scores == {}  # one replica left: nothing to score
    b.set_health(True)
    assert registry.pick("m") is not None
    assert set(seen[-1].scores["in-flight"]) == {"a", "b"}
    assert registry.pick("unknown") is None
    assert len(seen) == 3  # an unknown model is not a decision


def test_decisions_are_logged_only_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="fairgate.routing")
    two = [_replica("a"), _replica("b")]
    _registry(two, strategies={"m": LEAST_BUSY}).pick("m")
    assert not caplog.records
    _registry(two, strategies={"m": LEAST_BUSY}, log_decisions=True).pick("m", exclude={"b"})
    _registry(two, strategies={"m": LEAST_BUSY}, log_decisions=True).pick("m")
    first, second = (r.getMessage() for r in caplog.records)
    assert first == "route strategy=least-busy model=m replica=a dropped=[]"  # nothing scored
    assert "a=1.000(in-flight=1.000) b=1.000(in-flight=1.000)" in second


def test_snapshots_follow_the_live_replica() -> None:
    a = _replica("a")
    registry = _registry([a])
    first = registry.snapshots("m")[0]
    assert registry.snapshots("m")[0] is first  # nothing changed: the same snapshot
    a.in_flight = 2
    a.set_health(False)
    changed = registry.snapshots("m")[0]
    assert (changed.in_flight, changed.healthy) == (2, False)
    a.record_load(EngineLoad(running=1, waiting=3, kv_usage=0.2), fresh_for=5.0)
    assert registry.snapshots("m")[0].waiting == 3


def test_leases_spread_concurrent_requests() -> None:
    replicas = [_replica(n) for n in "ab"]
    registry = _registry(replicas, strategies={"m": LEAST_BUSY})
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


def test_lease_counts_and_releases_on_error() -> None:
    a = _replica("a")
    registry = _registry([a])
    with pytest.raises(RuntimeError), registry.lease(a):
        assert a.in_flight == 1
        raise RuntimeError("upstream broke")
    assert a.in_flight == 0
    registry.release(a)  # an extra release never goes negative
    assert a.in_flight == 0


def test_models_are_kept_apart() -> None:
    x, y = _replica("gpu01", model="x"), _replica("gpu01", model="y")
    registry = _registry([x, y])
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
    registry = _registry([a, b])
    assert registry.ready() == {"x": True, "y": True}
    a.set_health(False)
    b.breaker.failure()
    assert registry.ready() == {"x": False, "y": False}


def _seated(registry: ReplicaRegistry, seats: float) -> None:
    for replica in registry.all():
        replica.seats = seats


@pytest.mark.parametrize("fair_share", [True, False])
def test_within_share_requests_leave_a_home_whose_seats_are_promised(fair_share: bool) -> None:
    a, b = _replica("a"), _replica("b")
    registry = _registry([a, b], strategies={"m": HEAVIEST}, fair_share=fair_share)
    _seated(registry, 8.0)
    a.weight = 2  # HEAVIEST always prefers a: the affine replica of this test
    for _ in range(12):
        chosen = registry.pick("m", within_share=True)
        assert chosen is not None
        registry.acquire(chosen, True)
    if fair_share:
        assert (a.within_share, b.within_share) == (8, 4)
        # a borrower goes where a seat is free, and the strategy is told why
        assert registry.pick("m", within_share=False) is b
        assert registry.strategy("m").filter_names[-1] == "fair-share"  # type: ignore[union-attr]
    else:
        assert (a.within_share, b.within_share) == (12, 0)
        assert registry.pick("m", within_share=False) is a
    # A request outside fair share is never steered.
    assert registry.pick("m") is a
