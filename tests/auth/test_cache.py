"""The key cache: two bounded LRU maps with a TTL, misses never evicting valid keys."""

from __future__ import annotations

import math

import pytest

from fairgate.auth import Grant, KeyCache, sha256
from fairgate.core.principal import Principal

from .conftest import ManualClock


def grant(key_id: str, until: float = math.inf) -> Grant:
    return Grant(Principal(key_id=key_id, org="o", team="t"), until)


def digest(n: int) -> bytes:
    return sha256(f"fg-{n}")


def test_a_valid_key_is_served_until_its_ttl_then_forgotten(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 5.0, clock)
    cache.add_hit(digest(1), grant("k1"))
    clock.advance(29.9)
    found = cache.hit(digest(1))
    assert found is not None and found.principal.key_id == "k1"
    clock.advance(0.2)  # 30.1 s after the store answered: reading it did not extend it
    assert cache.hit(digest(1)) is None
    assert cache.sizes() == (0, 0)


def test_a_miss_is_remembered_for_its_own_ttl(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 5.0, clock)
    cache.add_miss(digest(1))
    clock.advance(4.9)
    assert cache.is_miss(digest(1))
    assert cache.hit(digest(1)) is None
    clock.advance(0.2)
    assert not cache.is_miss(digest(1))


def test_each_map_is_bounded_and_evicts_the_least_recently_used(clock: ManualClock) -> None:
    cache = KeyCache(3, 30.0, 3, 30.0, clock)
    for n in range(3):
        cache.add_hit(digest(n), grant(f"k{n}"))
    assert cache.hit(digest(0)) is not None  # 0 is now the most recently used
    cache.add_hit(digest(3), grant("k3"))
    assert cache.hit(digest(1)) is None  # the least recently used went
    assert all(cache.hit(digest(n)) is not None for n in (0, 2, 3))
    for n in range(10, 20):
        cache.add_miss(digest(n))
    assert cache.sizes() == (3, 3)
    assert [cache.is_miss(digest(n)) for n in (16, 17, 18, 19)] == [False, True, True, True]


def test_any_number_of_misses_leaves_every_valid_key_in_place(clock: ManualClock) -> None:
    cache = KeyCache(2, 30.0, 100, 30.0, clock)
    cache.add_hit(digest(-1), grant("a"))
    cache.add_hit(digest(-2), grant("b"))
    for n in range(10_000):
        cache.add_miss(digest(n))
    assert cache.sizes() == (2, 100)
    assert cache.hit(digest(-1)) is not None
    assert cache.hit(digest(-2)) is not None


def test_a_digest_is_a_hit_or_a_miss_never_both(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 30.0, clock)
    cache.add_miss(digest(1))
    cache.add_hit(digest(1), grant("k1"))
    assert not cache.is_miss(digest(1))
    cache.add_miss(digest(1))
    assert cache.hit(digest(1)) is None
    assert cache.sizes() == (0, 1)


def test_invalidate_forgets_a_digest_at_once(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 30.0, clock)
    cache.add_hit(digest(1), grant("k1"))
    cache.add_hit(digest(2), grant("k2"))
    cache.add_miss(digest(3))
    cache.invalidate(digest(1))
    cache.invalidate(digest(3))
    cache.invalidate(digest(4))  # unknown: nothing happens
    assert cache.hit(digest(1)) is None
    assert not cache.is_miss(digest(3))
    assert cache.hit(digest(2)) is not None


def test_re_adding_a_key_restarts_its_ttl(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 30.0, clock)
    cache.add_hit(digest(1), grant("old"))
    clock.advance(20)
    cache.add_hit(digest(1), grant("new"))
    clock.advance(20)
    found = cache.hit(digest(1))
    assert found is not None and found.principal.key_id == "new"


@pytest.mark.parametrize(
    ("hit_size", "hit_ttl", "miss_size", "miss_ttl"),
    [(0, 30.0, 10, 30.0), (10, 0.0, 10, 30.0), (10, 30.0, 0, 30.0), (10, 30.0, 10, -1.0)],
)
def test_sizes_and_ttls_must_be_positive(
    clock: ManualClock, hit_size: int, hit_ttl: float, miss_size: int, miss_ttl: float
) -> None:
    with pytest.raises(ValueError):
        KeyCache(hit_size, hit_ttl, miss_size, miss_ttl, clock)


def test_a_digest_once_valid_is_remembered_past_its_ttl_until_refused(clock: ManualClock) -> None:
    cache = KeyCache(2, 30.0, 10, 5.0, clock)
    cache.add_hit(digest(1), grant("k1"))
    clock.advance(3600)
    assert cache.hit(digest(1)) is None  # never served from memory past its TTL ...
    assert cache.was_valid(digest(1))  # ... but worth a lookup outside the limits
    cache.invalidate(digest(1))  # a local revoke: the next use asks the store
    assert cache.was_valid(digest(1))
    cache.add_miss(digest(1))  # the store refused it
    assert not cache.was_valid(digest(1))
    for n in range(2, 10):  # bounded like the valid keys: least recently used forgotten
        cache.add_hit(digest(n), grant(f"k{n}"))
    assert not cache.was_valid(digest(2))
    assert cache.was_valid(digest(9))
    assert not cache.was_valid(digest(100))  # a spray never gets here


def placed(key_id: str, team: str, org: str, project: str | None = None) -> Grant:
    return Grant(Principal(key_id=key_id, org=org, team=team, project=project))


def test_drop_forgets_every_valid_key_a_change_names_and_only_those(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 30.0, clock)
    cache.add_hit(digest(1), placed("k1", "t1", "o1", "p"))
    cache.add_hit(digest(2), placed("k2", "t1", "o1"))
    cache.add_hit(digest(3), placed("k3", "t2", "o1"))
    cache.add_hit(digest(4), placed("k4", "t3", "o2"))
    cache.add_hit(digest(5), placed("k5", "t3", "o2"))

    assert cache.drop("project", "t1/p") == 1
    assert cache.hit(digest(1)) is None and cache.hit(digest(2)) is not None
    assert cache.drop("team", "t1") == 1  # k2; k1 is gone already
    assert cache.drop("key", "k4") == 1
    assert cache.hit(digest(5)) is not None
    assert cache.drop("org", "o1") == 1  # k3
    assert cache.drop("org", "o1") == 0
    assert cache.sizes() == (1, 0)
    assert cache.was_valid(digest(1))  # asked again outside the failure limits, then refused


def test_a_change_of_an_unknown_kind_forgets_every_valid_key(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 30.0, clock)
    for n in range(3):
        cache.add_hit(digest(n), placed(f"k{n}", "t", "o"))
    assert cache.drop("tenant", "whatever") == 3
    assert cache.sizes() == (0, 0)


def test_the_index_forgets_what_the_cache_evicts_or_lets_expire(clock: ManualClock) -> None:
    cache = KeyCache(2, 30.0, 2, 30.0, clock)
    for n in range(1000):  # every key of its own team: the index would grow without bound
        cache.add_hit(digest(n), placed(f"k{n}", f"t{n}", f"o{n}"))
    assert len(cache._index) == 2 * 3
    clock.advance(31)
    assert cache.hit(digest(999)) is None and cache.hit(digest(998)) is None
    assert cache._index == {}
    # a key put again under another team is indexed there only
    cache.add_hit(digest(1), placed("k1", "old", "o"))
    cache.add_hit(digest(1), placed("k1", "new", "o"))
    assert cache.drop("team", "old") == 0
    assert cache.drop("team", "new") == 1


def test_a_store_answer_read_before_a_drop_is_not_cached_after_it(clock: ManualClock) -> None:
    cache = KeyCache(10, 30.0, 10, 30.0, clock)
    asked_at = cache.epoch
    cache.drop("key", "k1")  # the change is applied while the lookup is in flight
    cache.add_hit(digest(1), placed("k1", "t", "o"), epoch=asked_at)
    assert cache.hit(digest(1)) is None
    cache.add_hit(digest(1), placed("k1", "t", "o"), epoch=cache.epoch)
    assert cache.hit(digest(1)) is not None
