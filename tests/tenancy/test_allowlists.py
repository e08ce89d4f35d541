"""IP allowlists in the store: loaded with the key they apply to, withdrawn through the feed.

On both back ends: a key's record carries its organisation's, its team's and its
own list; each change writes the access-change feed (a change that changes nothing
writes none), and a ChangeWatcher over the real store drops exactly the cached keys
the changed list applies to.
"""

from __future__ import annotations

from fairgate.auth import ChangeWatcher, Grant, KeyCache, sha256
from fairgate.core.principal import Principal
from fairgate.store import Store, StoreChangeFeed, StoreKeyDirectory
from fairgate.tenancy import Tenancy
from store.backends import FakeClock
from tenancy.test_access_changes import feed, newest
from tenancy.world import DECLARED, OPERATOR


async def test_a_key_is_loaded_with_every_list_that_applies_to_it(
    tenancy: Tenancy, store: Store
) -> None:
    await tenancy.sync_orgs(DECLARED)
    key = await tenancy.keys.create(OPERATOR, team="a1")
    neighbour = await tenancy.keys.create(OPERATOR, team="a2")
    directory = StoreKeyDirectory(store)
    record = await directory.find_key(sha256(key.secret), 0)
    assert record is not None
    assert (record.org_cidrs, record.team_cidrs, record.cidrs) == (None, None, None)

    await tenancy.allowlists.set(OPERATOR, "org", "A", ["10.0.0.0/8"])
    await tenancy.allowlists.set(OPERATOR, "team", "a1", ["10.1.0.0/16", "2001:db8::/32"])
    await tenancy.allowlists.set(OPERATOR, "key", key.key.id, ["10.1.2.3"])
    record = await directory.find_key(sha256(key.secret), 0)
    assert record is not None
    assert record.org_cidrs == ("10.0.0.0/8",)
    assert record.team_cidrs == ("10.1.0.0/16", "2001:db8::/32")
    assert record.cidrs == ("10.1.2.3/32",)
    other = await directory.find_key(sha256(neighbour.secret), 0)
    assert other is not None
    assert (other.org_cidrs, other.team_cidrs, other.cidrs) == (("10.0.0.0/8",), None, None)

    await tenancy.allowlists.set(OPERATOR, "team", "a1", [])
    record = await directory.find_key(sha256(key.secret), 0)
    assert record is not None and record.team_cidrs is None


async def test_each_change_writes_the_feed_and_a_change_to_nothing_does_not(
    tenancy: Tenancy, store: Store
) -> None:
    await tenancy.sync_orgs(DECLARED)
    key = await tenancy.keys.create(OPERATOR, team="a1")
    mark = await newest(store)
    await tenancy.allowlists.set(OPERATOR, "org", "A", ["10.0.0.0/8"])
    await tenancy.allowlists.set(OPERATOR, "org", "A", ["10.0.0.0/8"])  # the same: no change
    await tenancy.allowlists.set(OPERATOR, "team", "a1", ["10.1.0.0/16"])
    await tenancy.allowlists.set(OPERATOR, "key", key.key.id, ["10.1.2.3"])
    await tenancy.allowlists.set(OPERATOR, "key", key.key.id, [])
    await tenancy.allowlists.set(OPERATOR, "key", key.key.id, [])  # nothing to remove
    assert await feed(store, mark) == [
        ("org", "A"),
        ("team", "a1"),
        ("key", key.key.id),
        ("key", key.key.id),
    ]


async def test_the_watcher_drops_the_cached_keys_a_changed_list_applies_to(
    tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    await tenancy.sync_orgs(DECLARED)
    cache = KeyCache(100, 3600.0, 100, 3600.0, clock)
    watcher = ChangeWatcher(StoreChangeFeed(store), cache, clock, interval=0.5)
    await watcher.start()

    def cached(n: int, key_id: str, team: str, org: str) -> bytes:
        digest = sha256(f"fg-{n}")
        cache.add_hit(digest, Grant(Principal(key_id=key_id, org=org, team=team)))
        return digest

    key = await tenancy.keys.create(OPERATOR, team="a1")
    own = cached(1, key.key.id, "a1", "A")
    in_a1 = cached(2, "k-a1", "a1", "A")
    in_a2 = cached(3, "k-a2", "a2", "A")
    in_b1 = cached(4, "k-b1", "b1", "B")

    await tenancy.allowlists.set(OPERATOR, "key", key.key.id, ["10.0.0.1"])
    assert await watcher.read() == 1
    assert cache.hit(own) is None and cache.hit(in_a1) is not None

    await tenancy.allowlists.set(OPERATOR, "team", "a2", ["10.0.0.0/8"])
    assert await watcher.read() == 1
    assert cache.hit(in_a2) is None and cache.hit(in_a1) is not None

    await tenancy.allowlists.set(OPERATOR, "org", "A", ["10.0.0.0/8"])
    assert await watcher.read() == 1
    assert cache.hit(in_a1) is None and cache.hit(in_b1) is not None
