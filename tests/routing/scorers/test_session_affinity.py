"""session-affinity: a session sticks to its home replica, within a bounded load."""

from __future__ import annotations

import math
import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import RequestFeatures, RoutingState, build_strategy, route
from fairgate.routing.scorers.session_affinity import SessionAffinityScorer

from ..replicas import MODEL, replica

SCORER = SessionAffinityScorer(epsilon=0.25)
STATE = RoutingState()


def home(replicas: list[ReplicaSnapshot], session: str | None) -> str | None:
    scores = SCORER.score(replicas, RequestFeatures(MODEL, session), STATE)
    chosen = [r.name for r, s in zip(replicas, scores, strict=True) if s == 1.0]
    assert len(chosen) <= 1
    return chosen[0] if chosen else None


def test_a_session_keeps_its_replica_whatever_the_listing_order() -> None:
    replicas = [replica(f"gpu{i}") for i in range(5)]
    for session in ("alice", "bob", "key-123"):
        first = home(replicas, session)
        assert first is not None
        assert home(list(reversed(replicas)), session) == first
        assert SessionAffinityScorer(epsilon=0.25).score(
            replicas, RequestFeatures(MODEL, session), STATE
        ) == SCORER.score(replicas, RequestFeatures(MODEL, session), STATE)


def test_without_a_session_key_nobody_is_preferred() -> None:
    replicas = [replica(f"gpu{i}") for i in range(3)]
    assert home(replicas, None) is None


def test_removing_a_replica_moves_only_its_own_sessions() -> None:
    replicas = [replica(f"gpu{i}") for i in range(5)]
    sessions = [f"s{i}" for i in range(400)]
    before = {s: home(replicas, s) for s in sessions}
    after = {s: home(replicas[:-1], s) for s in sessions}
    moved = {s for s in sessions if before[s] != after[s]}
    assert moved == {s for s in sessions if before[s] == "gpu4"}
    assert moved  # the removed replica did own some sessions


def test_sessions_spread_over_the_replicas() -> None:
    replicas = [replica(f"gpu{i}") for i in range(4)]
    counts = Counter(home(replicas, f"session-{i}") for i in range(2000))
    assert set(counts) == {f"gpu{i}" for i in range(4)}
    assert all(300 <= c <= 700 for c in counts.values())  # 500 each on average


def test_an_overloaded_home_spills_to_the_next_replica_on_the_ring() -> None:
    idle = [replica(f"gpu{i}") for i in range(4)]
    usual = home(idle, "alice")
    loaded = [replica(r.name, in_flight=40 if r.name == usual else 0) for r in idle]
    spilled = home(loaded, "alice")
    assert spilled is not None and spilled != usual


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.integers(min_value=1, max_value=8),
    epsilon=st.sampled_from([0.1, 0.25, 0.5, 1.0]),
    sessions=st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=150),
)
def test_no_replica_goes_over_its_bound(replicas: int, epsilon: float, sessions: list[int]) -> None:
    strategy = build_strategy(
        "sticky",
        {"scorers": {"session-affinity": {"weight": 1, "epsilon": epsilon}}, "picker": "max-score"},
    )
    loads = dict.fromkeys((f"gpu{i}" for i in range(replicas)), 0)
    rng = random.Random(0)
    for n, session in enumerate(sessions, start=1):
        snapshots = [replica(name, in_flight=load) for name, load in loads.items()]
        decision = route(strategy, snapshots, RequestFeatures(MODEL, f"s{session}"), rng)
        assert decision.replica is not None
        loads[decision.replica] += 1
        # Mirrokni et al.: nobody above ceil((1 + ε) · average) at any time.
        assert max(loads.values()) <= math.ceil((1 + epsilon) * n / replicas)
