"""SCIM searches over a real store (SQLite and PostgreSQL): the shapes provisioning clients
send most are answered from the rows they can match, not from the whole directory.

A filter ``userName eq`` / ``displayName eq`` is one SELECT on the unique name index
and a plain page one SELECT with LIMIT/OFFSET plus a COUNT; every other search still
reads every resource of its types and lets scim2-server decide. The statements are
watched on the store's real engine; the answers are checked against what the whole
directory gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scim2_models import Group, SearchRequest, User
from sqlalchemy import event

from fairgate.config.scim import Scim
from fairgate.config.secrets import SecretRef
from fairgate.scim.provider import scim_provider
from fairgate.scim.reconcile import Reconciler
from fairgate.scim.storage import StoreScimStorage
from fairgate.store import Store
from store.backends import FakeClock

CONFIG = Scim(token_file=SecretRef(path="unused"))
USERS = 30


def _storage(store: Store, clock: FakeClock) -> StoreScimStorage:
    return StoreScimStorage(store, scim_provider(200), Reconciler(CONFIG), clock)


def _types(storage: StoreScimStorage, name: str) -> list[Any]:
    provider = scim_provider(200)
    return [rt for rt in provider.resource_types if rt.name == name]


@contextmanager
def _selects(store: Store) -> Iterator[list[str]]:
    """The SELECTs on scim_resources the store's engine ran while the block ran."""
    seen: list[str] = []
    engine = store.engine.sync_engine

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "scim_resources" in statement:
            seen.append(" ".join(statement.split()).lower())

    event.listen(engine, "after_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "after_cursor_execute", record)


async def _directory(storage: StoreScimStorage) -> list[str]:
    users = _types(storage, "User")[0]
    ids = []
    for n in range(USERS):
        made = await storage.create(users, User(user_name=f"user-{n}", display_name=f"U {n}"))
        ids.append(str(made.id))
    groups = _types(storage, "Group")[0]
    await storage.create(groups, Group(display_name="Lab T"))
    return sorted(ids)


async def _search(
    storage: StoreScimStorage, kind: str, **request: Any
) -> tuple[int | None, list[Any]]:
    page = await storage.search(_types(storage, kind), SearchRequest(**request))
    return page.total, page.resources


async def test_an_eq_filter_on_the_name_reads_by_the_name_index(
    store: Store, clock: FakeClock
) -> None:
    storage = _storage(store, clock)
    await _directory(storage)
    for spelling in (
        'userName eq "USER-7"',
        'username eq "user-7"',
        'urn:ietf:params:scim:schemas:core:2.0:User:userName eq "User-7"',
    ):
        with _selects(store) as seen:
            total, found = await _search(storage, "User", filter=spelling)
        assert total == 1 and [u.user_name for u in found] == ["user-7"], spelling
        assert len(seen) == 1 and "name_key" in seen[0], seen
    with _selects(store) as seen:
        total, found = await _search(storage, "User", filter='userName eq "nobody"')
    assert total == 0 and found == [] and "name_key" in seen[0]
    with _selects(store) as seen:
        total, found = await _search(storage, "Group", filter='displayName eq "LAB t"')
    assert total == 1 and [g.display_name for g in found] == ["Lab T"]
    assert "name_key" in seen[0]


async def test_a_group_created_with_spaces_around_its_name_is_found_by_the_name(
    store: Store, clock: FakeClock
) -> None:
    # A provider looks a group up before creating it: the group the uniqueness check
    # says exists must be the one the lookup finds, or the provider never converges.
    storage = _storage(store, clock)
    made = await storage.create(_types(storage, "Group")[0], Group(display_name=" Lab A  "))
    assert made.display_name == "Lab A"
    for spelling in ("lab a", " Lab A  ", "LAB A "):
        total, found = await _search(storage, "Group", filter=f'displayName eq "{spelling}"')
        assert total == 1 and [g.id for g in found] == [made.id], spelling
    # a name that folds differently in lower case and in case folding: found as refused
    folded = await storage.create(_types(storage, "Group")[0], Group(display_name="Straße"))
    total, found = await _search(storage, "Group", filter='displayName eq "STRASSE"')
    assert total == 1 and [g.id for g in found] == [folded.id]
    total, found = await _search(storage, "Group", filter='displayName eq "Lab B"')
    assert total == 0 and found == []


async def test_other_filters_read_everything_and_stay_exact(store: Store, clock: FakeClock) -> None:
    storage = _storage(store, clock)
    await _directory(storage)
    with _selects(store) as seen:
        total, found = await _search(storage, "User", filter='userName sw "user-1"')
    assert total == 11 and {u.user_name for u in found} == {"user-1"} | {
        f"user-1{n}" for n in range(10)
    }
    assert "name_key" not in seen[0] and "limit" not in seen[0], seen
    # eq on another attribute, or the name inside a larger expression: no narrowing
    total, found = await _search(storage, "User", filter='displayName eq "U 3"')
    assert [u.user_name for u in found] == ["user-3"]
    total, found = await _search(
        storage, "User", filter='userName eq "user-3" or userName eq "user-4"'
    )
    assert total == 2


async def test_a_plain_page_reads_its_rows_and_a_count(store: Store, clock: FakeClock) -> None:
    storage = _storage(store, clock)
    ids = await _directory(storage)
    with _selects(store) as seen:
        total, found = await _search(storage, "User", start_index=11, count=5)
    assert total == USERS
    assert [u.id for u in found] == ids[10:15]  # the unsorted order: by id
    assert len(seen) == 2 and any("count(" in s for s in seen)
    assert any("limit" in s and "offset" in s for s in seen), seen
    # the same page as the library computes over the whole directory (sorted by id)
    _, whole = await _search(storage, "User", sort_by="id", start_index=11, count=5)
    assert [u.id for u in whole] == ids[10:15]
    total, found = await _search(storage, "User", start_index=29, count=10)
    assert total == USERS and [u.id for u in found] == ids[28:]
    total, found = await _search(storage, "User", count=0)
    assert total == USERS and found == []


async def test_a_page_past_any_row_is_empty_not_an_error(store: Store, clock: FakeClock) -> None:
    """A provider (or an attacker holding its token) asking for ``startIndex`` beyond what
    a SQL OFFSET can hold gets an empty page with the total, not a 500."""
    storage = _storage(store, clock)
    await _directory(storage)
    for start in (2**63, 10**20):
        total, found = await _search(storage, "User", start_index=start, count=5)
        assert total == USERS and found == []
        total, found = await _search(storage, "User", start_index=start)
        assert total == USERS and found == []
