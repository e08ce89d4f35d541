"""A per-model budget binds the model the limiter compares: set on an alias, it is stored
under the model's canonical name; one stored under an alias before is read as such."""

from __future__ import annotations

import pytest
from sqlalchemy import true

from fairgate.core.errors import BadRequest
from fairgate.core.money import Money
from fairgate.limits import Subject
from fairgate.store import budgets as budget_rows
from fairgate.store import from_unix, new_ulid
from fairgate.store.budgets import NewBudgetRow
from fairgate.tenancy import Tenancy
from store.backends import FakeClock
from tenancy.world import OPERATOR, build_world

A1 = Subject(key="k", org="A", team="a1")


async def test_a_budget_set_on_an_alias_is_stored_and_binds_under_the_canonical_name(
    tenancy: Tenancy,
) -> None:
    world = await build_world(tenancy)
    olga = await world.actor("olga")
    budget = await tenancy.budgets.set(
        olga, scope="team:a1", period="day", max=Money(5), model="llama70b"
    )
    assert budget.model == "llama-70b"
    # setting it again through the canonical name is the same budget, not a second one
    again = await tenancy.budgets.set(
        olga, scope="team:a1", period="day", max=Money(7), model="llama-70b"
    )
    assert again.id == budget.id
    book = await tenancy.budgets.book()
    (found,) = book.applicable(A1, "llama-70b")  # requests carry the canonical name
    assert (found.model, found.max) == ("llama-70b", Money(7))
    assert book.applicable(A1, "llama-8b") == ()


async def test_an_unknown_model_is_refused_with_what_to_give_instead(tenancy: Tenancy) -> None:
    await build_world(tenancy)
    with pytest.raises(BadRequest, match="give a model's name or one of its aliases") as refused:
        await tenancy.budgets.set(
            OPERATOR, scope="team:a1", period="day", max=Money(5), model="llama-7b"
        )
    assert refused.value.code == "model_not_found"
    assert await tenancy.budgets.list(OPERATOR) == []


async def test_a_budget_stored_under_an_alias_before_binds_its_model(
    tenancy: Tenancy, clock: FakeClock
) -> None:
    """An existing install: the row was written verbatim by an earlier version."""
    await build_world(tenancy)
    async with tenancy.store.write() as conn:
        await budget_rows.upsert(
            conn,
            NewBudgetRow(
                id=new_ulid(clock.wall()),
                scope_kind="team",
                scope="a1",
                model="llama70b",
                period="day",
                max_micro=5,
                soft_micro=None,
                org_id=None,
                team_id=None,
                created_by="earlier",
            ),
            from_unix(clock.wall()),
            true(),
        )
    (found,) = (await tenancy.budgets.book()).applicable(A1, "llama-70b")
    assert found.model == "llama-70b"
