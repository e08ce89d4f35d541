"""Budgets through the service: one per scope, model and period; exact amounts; the book."""

from __future__ import annotations

import pytest
from sqlalchemy import insert, select

from fairgate.core.errors import BadRequest, NotFound
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget, Increase
from fairgate.limits.subject import Subject
from fairgate.store import Store, from_unix
from fairgate.store.tables import budgets as budgets_table
from fairgate.tenancy import Tenancy, public
from store.backends import FakeClock
from tenancy.world import DECLARED, OPERATOR

DAY = 86400.0


@pytest.fixture
async def synced(tenancy: Tenancy) -> Tenancy:
    await tenancy.sync_orgs(DECLARED)
    await tenancy.projects.create(OPERATOR, team="a1", name="p")
    return tenancy


async def test_a_second_set_of_the_same_scope_model_and_period_updates_the_budget(
    synced: Tenancy,
) -> None:
    first = await synced.budgets.set(
        OPERATOR, scope="team:a1", period="month", max=Money.from_units(100)
    )
    again = await synced.budgets.set(
        OPERATOR, scope="team:a1", period="month", max=Money.from_units(50), soft=Money(40)
    )
    assert again.id == first.id and (again.max, again.soft_micro) == ("50", 40)
    other_model = await synced.budgets.set(
        OPERATOR, scope="team:a1", period="month", max=Money(1), model="llama-8b"
    )
    other_period = await synced.budgets.set(OPERATOR, scope="team:a1", period="day", max=Money(1))
    listed = await synced.budgets.list(OPERATOR, scope="team:a1")
    assert sorted(b.id for b in listed) == sorted({first.id, other_model.id, other_period.id})
    assert {(b.model, b.period) for b in listed} == {
        (None, "month"),
        ("llama-8b", "month"),
        (None, "day"),
    }


async def test_amounts_are_stored_as_integer_micro_units_and_shown_as_exact_decimals(
    synced: Tenancy, store: Store
) -> None:
    budget = await synced.budgets.set(
        OPERATOR,
        scope="project:a1/p",
        period="week",
        max=Money.from_units("0.1"),
        soft=Money.from_units("0.07"),
    )
    async with store.read() as conn:
        row = (await conn.execute(select(budgets_table))).mappings().one()
    assert (row["max_micro"], row["soft_micro"], row["model"]) == (100_000, 70_000, "")
    shown = public(budget)
    assert (shown["scope"], shown["max"], shown["soft"], shown["id"]) == (
        "project:a1/p",
        "0.1",
        "0.07",
        budget.id,
    )
    assert shown["created_by"] == "operator:test" and shown["increases"] == []


async def test_the_book_holds_every_budget_as_the_limiter_reads_it(
    synced: Tenancy, clock: FakeClock
) -> None:
    key = (await synced.keys.create(OPERATOR, team="a1", tags=["ci"])).key.id
    await synced.budgets.set(OPERATOR, scope="org:A", period="month", max=Money.from_units(100))
    raised = await synced.budgets.set(
        OPERATOR, scope=f"key:{key}", period="day", max=Money.from_units(2), model="llama-8b"
    )
    await synced.budgets.set(OPERATOR, scope="tag:ci", period="week", max=Money(5))
    await synced.budgets.set(OPERATOR, scope="team:b1", period="day", max=Money(7))
    until = clock.now + 7 * DAY
    await synced.budgets.increase(OPERATOR, raised.id, by=Money.from_units(1), until=until)
    book = await synced.budgets.book()
    assert len(book) == 4
    subject = Subject(key=key, org="A", team="a1", project="a1/p", tags=("ci",))
    found = book.applicable(subject, "llama-8b")
    assert [(b.scope_kind, b.scope) for b in found] == [("org", "A"), ("key", key), ("tag", "ci")]
    assert found[1] == Budget(
        "key",
        key,
        "llama-8b",
        "day",
        max=Money(2_000_000),
        increases=(Increase(Money(1_000_000), until),),
    )
    assert found[1].effective_max(clock.now) == Money(3_000_000)
    assert [b.scope for b in book.applicable(subject, "qwen-32b")] == ["A", "ci"]


async def test_an_increase_raises_the_cap_until_it_expires_and_survives_a_second_set(
    synced: Tenancy, clock: FakeClock
) -> None:
    budget = await synced.budgets.set(OPERATOR, scope="team:a1", period="month", max=Money(10))
    raised = await synced.budgets.increase(OPERATOR, budget.id, by=Money(5), until=clock.now + DAY)
    assert (raised.effective_max, len(raised.increases)) == ("0.000015", 1)
    again = await synced.budgets.set(OPERATOR, scope="team:a1", period="month", max=Money(20))
    assert again.effective_max == "0.000025"
    clock.advance(DAY)
    later = await synced.budgets.get(OPERATOR, budget.id)
    assert (later.effective_max, later.increases) == ("0.00002", ())
    assert (await synced.budgets.book()).applicable(Subject("k", "A", "a1"), "m")[0].increases == ()


async def test_delete_removes_the_budget_and_its_increases(
    synced: Tenancy, clock: FakeClock
) -> None:
    budget = await synced.budgets.set(OPERATOR, scope="team:a1", period="day", max=Money(10))
    await synced.budgets.increase(OPERATOR, budget.id, by=Money(5), until=clock.now + DAY)
    gone = await synced.budgets.delete(OPERATOR, budget.id)
    assert gone.id == budget.id
    assert await synced.budgets.list(OPERATOR) == []
    with pytest.raises(NotFound):
        await synced.budgets.delete(OPERATOR, budget.id)
    assert len(await synced.budgets.book()) == 0


@pytest.mark.parametrize(
    ("scope", "period", "max_units", "soft_units", "model", "code"),
    [
        ("team", "day", "1", None, None, "invalid_scope"),
        ("group:a1", "day", "1", None, None, "invalid_scope"),
        ("project:p", "day", "1", None, None, "invalid_scope"),
        ("team:a1", "year", "1", None, None, "invalid_period"),
        ("team:a1", "day", "-1", None, None, "invalid_amount"),
        ("team:a1", "day", "1", "2", None, "invalid_amount"),
        ("team:a1", "day", "1", None, "gpt-4", "model_not_found"),
    ],
)
async def test_invalid_input_is_refused_and_writes_nothing(
    synced: Tenancy,
    scope: str,
    period: str,
    max_units: str,
    soft_units: str | None,
    model: str | None,
    code: str,
) -> None:
    with pytest.raises(BadRequest) as refused:
        await synced.budgets.set(
            OPERATOR,
            scope=scope,
            period=period,
            max=Money.from_units(max_units),
            soft=None if soft_units is None else Money.from_units(soft_units),
            model=model,
        )
    assert refused.value.code == code
    assert await synced.budgets.list(OPERATOR) == []


async def test_an_increase_must_end_in_the_coming_year_and_add_something(
    synced: Tenancy, clock: FakeClock
) -> None:
    budget = await synced.budgets.set(OPERATOR, scope="team:a1", period="day", max=Money(10))
    for by, until in [
        (Money(5), clock.now - 1),
        (Money(5), clock.now + 400 * DAY),
        (Money(0), clock.now + DAY),
    ]:
        with pytest.raises(BadRequest):
            await synced.budgets.increase(OPERATOR, budget.id, by=by, until=until)
    assert (await synced.budgets.get(OPERATOR, budget.id)).increases == ()


async def test_unknown_scopes_are_not_found(synced: Tenancy) -> None:
    for scope in ("org:Z", "team:zz", "project:a1/nope", "key:01ABCDEFGHJKMNPQRSTVWXYZ00"):
        with pytest.raises(NotFound):
            await synced.budgets.set(OPERATOR, scope=scope, period="day", max=Money(1))


async def test_every_change_is_audited_with_its_scope(synced: Tenancy, clock: FakeClock) -> None:
    budget = await synced.budgets.set(OPERATOR, scope="team:a1", period="day", max=Money(10))
    await synced.budgets.set(OPERATOR, scope="team:a1", period="day", max=Money(11))
    await synced.budgets.increase(OPERATOR, budget.id, by=Money(5), until=clock.now + DAY)
    await synced.budgets.delete(OPERATOR, budget.id)
    events = await synced.audit.list(OPERATOR)
    ours = [e for e in events if e.action.startswith("budget.")]
    assert [e.action for e in reversed(ours)] == [
        "budget.set",
        "budget.set",
        "budget.increased",
        "budget.deleted",
    ]
    assert all(e.target == f"budget:{budget.id}" and e.actor == "operator:test" for e in ours)
    first_set = ours[-1].detail
    assert first_set is not None and first_set["created"] is True
    assert first_set["max_micro"] == 10 and first_set["scope"] == "team:a1"


async def test_the_book_holds_every_budget_however_many_there_are(
    synced: Tenancy, store: Store, clock: FakeClock
) -> None:
    """The limiter's book is every stored budget: one left out is never enforced. A large
    install (a day budget on each of ten thousand keys) must not push a team's budget out."""
    now = from_unix(clock.wall())
    filler = [
        {
            "id": f"F{n:025d}",
            "scope_kind": "key",
            "scope": f"k{n:05d}",
            "model": "",
            "period": "day",
            "max_micro": 1,
            "soft_micro": None,
            "org_id": None,
            "team_id": None,
            "created_at": now,
            "created_by": "test",
            "updated_at": now,
        }
        for n in range(10_000)
    ]
    async with store.write() as conn:
        await conn.execute(insert(budgets_table), filler)
    # sorts after every key budget (by kind, then scope)
    await synced.budgets.set(OPERATOR, scope="team:a1", period="month", max=Money(7))
    book = await synced.budgets.book()
    (team_budget,) = book.applicable(Subject(key="k", org="A", team="a1"), "llama-8b")
    assert (team_budget.scope_kind, team_budget.scope, team_budget.max) == ("team", "a1", Money(7))
