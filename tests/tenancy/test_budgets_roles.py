"""Who may set, raise, delete and read which budget, with two organisations (see world.py).

A budget is set from the level above its scope: nobody raises their own ceiling.
A refused write changes nothing (every table read back); a budget id guessed
from another tenant answers NotFound, like a budget that does not exist.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from fairgate.core.errors import Forbidden, NotFound
from fairgate.core.money import Money
from fairgate.store import Store
from fairgate.store.tables import metadata
from fairgate.tenancy import Tenancy
from store.backends import FakeClock
from tenancy.world import OPERATOR, World, build_world

F, N = Forbidden, NotFound


async def _snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    async with store.read() as conn:
        return {
            table.name: sorted((tuple(row) for row in await conn.execute(select(table))), key=repr)
            for table in metadata.sorted_tables
        }


def _scope(world: World, scope: str) -> str:
    """``key:a1`` → ``key:<id of the world's key a1>``."""
    kind, _, name = scope.partition(":")
    return f"key:{world.keys[name]}" if kind == "key" else scope


ALLOWED = [
    ("alice", "org:A"),
    ("alice", "tag:ci"),
    ("olga", "team:a1"),
    ("olga", "project:a2/p"),
    ("olga", "key:mia"),
    ("tom", "project:a1/p"),
    ("tom", "key:a1"),
    ("tom", "key:mo"),
    ("bob", "team:b1"),
    ("olga", "tag:org:A/grant"),  # a slice of its organisation's traffic, set like a team's
    ("olga", "tag:team:a2/grant"),
    ("tom", "tag:team:a1/grant"),  # a slice of its team's, set like a project's
    ("bob", "tag:org:B/grant"),
]

REFUSED = [
    ("olga", "org:A", F),  # its own organisation's cap comes from the proxy admins
    ("olga", "org:B", N),
    ("olga", "team:b1", N),
    ("olga", "key:b1", N),
    ("olga", "tag:ci", F),
    ("tom", "team:a1", F),  # its own team's cap comes from the org admins
    ("tom", "team:a2", N),
    ("tom", "project:a2/p", N),
    ("tom", "key:b1", N),
    ("mia", "key:mia", F),  # a member does not cap (or uncap) its own key
    ("mia", "project:a1/p", F),
    ("vic", "team:a1", F),
    ("val", "project:a1/p", F),
    ("pat", "team:b1", F),
    ("bob", "team:a1", N),
    ("bob", "org:B", F),
    ("ua", "team:a1", N),
    ("olga", "tag:grant", F),  # a proxy-wide tag binds every tenant: proxy admins only
    ("bob", "tag:org:A/grant", N),  # another organisation's tag
    ("bob", "tag:team:a1/grant", N),
    ("tom", "tag:org:A/grant", F),  # its organisation's, set from above the team
    ("tom", "tag:team:a2/grant", N),
    ("mia", "tag:team:a1/grant", F),
    ("vic", "tag:org:A/grant", F),
]


@pytest.mark.parametrize(("user", "scope"), ALLOWED)
async def test_a_budget_within_the_role_is_set_and_audited(
    tenancy: Tenancy, user: str, scope: str
) -> None:
    world = await build_world(tenancy)
    actor = await world.actor(user)
    budget = await tenancy.budgets.set(
        actor, scope=_scope(world, scope), period="day", max=Money.from_units(3)
    )
    assert [b.id for b in await tenancy.budgets.list(actor)] == [budget.id]
    events = await tenancy.audit.list(OPERATOR, action="budget.set")
    assert [e.actor for e in events] == [f"user:{user}"]


async def test_every_budget_write_outside_the_role_is_refused_and_changes_nothing(
    tenancy: Tenancy, store: Store
) -> None:
    world = await build_world(tenancy)
    before = await _snapshot(store)
    wrong: list[str] = []
    for user, scope, expected in REFUSED:
        actor = await world.actor(user)
        try:
            await tenancy.budgets.set(actor, scope=_scope(world, scope), period="day", max=Money(1))
        except (Forbidden, NotFound) as refused:
            if type(refused) is not expected:
                wrong.append(f"{user} {scope}: {type(refused).__name__}, not {expected.__name__}")
        else:
            wrong.append(f"{user} {scope}: allowed")
        if await _snapshot(store) != before:
            wrong.append(f"{user} {scope}: the store changed")
            before = await _snapshot(store)
    assert wrong == []


async def test_a_guessed_budget_id_from_another_tenant_changes_nothing(
    tenancy: Tenancy, store: Store, clock: FakeClock
) -> None:
    world = await build_world(tenancy)
    in_a = await tenancy.budgets.set(OPERATOR, scope="team:a1", period="month", max=Money(10))
    on_org = await tenancy.budgets.set(OPERATOR, scope="org:A", period="month", max=Money(10))
    before = await _snapshot(store)
    bob, tom, vic = [await world.actor(u) for u in ("bob", "tom", "vic")]
    until = clock.now + 3600
    for actor, budget_id, expected in [
        (bob, in_a.id, N),
        (bob, on_org.id, N),
        (tom, in_a.id, F),  # visible to its team admin, set by the org admins
        (vic, in_a.id, F),
        (await world.actor("olga"), on_org.id, F),
    ]:
        with pytest.raises(expected):
            await tenancy.budgets.delete(actor, budget_id)
        with pytest.raises(expected):
            await tenancy.budgets.increase(actor, budget_id, by=Money(5), until=until)
        if expected is N:
            with pytest.raises(N):
                await tenancy.budgets.get(actor, budget_id)
    assert await _snapshot(store) == before


async def test_listings_show_each_reader_the_budgets_of_what_it_reads(tenancy: Tenancy) -> None:
    world = await build_world(tenancy)
    for scope in ("org:A", "org:B", "team:a1", "team:a2", "team:b1", "project:a1/p", "tag:ci",
                  "tag:org:A/ci", "tag:team:a1/ci", "tag:team:b1/ci"):  # fmt: skip
        await tenancy.budgets.set(OPERATOR, scope=scope, period="month", max=Money(10))
    for key in ("mia", "mo", "b1"):
        await tenancy.budgets.set(
            OPERATOR, scope=f"key:{world.keys[key]}", period="day", max=Money(1)
        )
    names = {f"key:{world.keys[k]}": f"key:{k}" for k in ("mia", "mo", "b1")}

    async def seen(user: str) -> set[str]:
        listed = await tenancy.budgets.list(await world.actor(user))
        return {names.get(b.scope, b.scope) for b in listed}

    owned_a = {"tag:org:A/ci", "tag:team:a1/ci"}
    assert len(await seen("pat")) == 13
    assert await seen("bob") == {"org:B", "team:b1", "key:b1", "tag:team:b1/ci"}
    assert await seen("olga") == await seen("vic")
    assert await seen("vic") == {
        "org:A", "team:a1", "team:a2", "project:a1/p", "key:mia", "key:mo", *owned_a
    }  # fmt: skip
    assert await seen("val") == {"org:A", "team:a1", "project:a1/p", "key:mia", "key:mo",
                                 "tag:team:a1/ci"}  # fmt: skip
    assert await seen("mia") == {"org:A", "team:a1", "project:a1/p", "key:mia",
                                 "tag:team:a1/ci"}  # fmt: skip
    assert await seen("ua") == set()
