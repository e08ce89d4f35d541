"""The consistent-hash ring and its bounded-load lookup."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairgate.routing.ring import HashRing, load_bound


def test_a_walk_meets_every_replica_once() -> None:
    ring = HashRing(["a", "b", "c", "a"], vnodes=16)
    assert ring.names == frozenset("abc")
    walk = list(ring.walk("some-session"))
    assert sorted(walk) == ["a", "b", "c"]
    assert list(ring.walk("some-session")) == walk
    assert list(HashRing([]).walk("x")) == []


def test_homes_are_the_same_in_every_process() -> None:
    # BLAKE2b, not hash(): every gateway replica must agree on a session's home.
    ring = HashRing([f"gpu{i}" for i in range(4)], vnodes=64)
    assert [next(ring.walk(f"s{i}")) for i in range(6)] == [
        "gpu1",
        "gpu0",
        "gpu2",
        "gpu0",
        "gpu1",
        "gpu1",
    ]


def test_the_bound_follows_mirrokni() -> None:
    assert load_bound(0, 4, 0.25) == 1
    assert load_bound(99, 4, 0.25) == 32  # ceil(1.25 × 100 / 4) = ceil(31.25)
    assert load_bound(7, 8, 0.0) == 1


def test_home_skips_replicas_at_their_bound() -> None:
    ring = HashRing(["a", "b", "c"], vnodes=32)
    first = next(ring.walk("k"))
    assert ring.home("k", {}, 0.25) == first
    # first carries 4 of 4: the bound for the 5th request is ceil(1.25 × 5 / 3) = 3.
    assert ring.home("k", {first: 4}, 0.25) != first
    assert HashRing([]).home("k", {}, 0.25) is None


def test_invalid_vnodes_are_refused() -> None:
    with pytest.raises(ValueError):
        HashRing(["a"], vnodes=0)


@settings(max_examples=100, deadline=None)
@given(
    loads=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    epsilon=st.sampled_from([0.01, 0.25, 1.0]),
    key=st.text(max_size=10),
)
def test_the_home_is_always_under_the_bound(loads: list[int], epsilon: float, key: str) -> None:
    names = [f"r{i}" for i in range(len(loads))]
    ring = HashRing(names, vnodes=8)
    by_name = dict(zip(names, loads, strict=True))
    home = ring.home(key, by_name, epsilon)
    assert home is not None
    assert by_name[home] < math.ceil((1 + epsilon) * (sum(loads) + 1) / len(loads))
    # Every replica before it on the walk was at or over the bound.
    for name in ring.walk(key):
        if name == home:
            break
        assert by_name[name] >= load_bound(sum(loads), len(loads), epsilon)
