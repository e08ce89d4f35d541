"""Budgets: their caps, increases, counters and which ones a request falls under."""

from __future__ import annotations

import pytest

from fairgate.core.money import Money
from fairgate.limits import Budget, BudgetBook, Increase, Subject

SUBJECT = Subject(key="k1", org="etabA", team="lab-nlp", project="p1", tags=("eval",))


def budget(kind: str, scope: str, model: str | None = None, period: str = "month") -> Budget:
    return Budget(kind, scope, model, period, Money.from_units(10))  # type: ignore[arg-type]


def test_a_request_falls_under_every_scope_for_all_models_and_its_own() -> None:
    book = BudgetBook(
        [
            budget("org", "etabA"),
            budget("team", "lab-nlp", "llama"),
            budget("team", "lab-nlp", "mistral"),  # another model
            budget("team", "lab-vision"),  # another team
            budget("project", "p1", period="day"),
            budget("key", "k1"),
            budget("key", "k2"),
            budget("tag", "eval", period="week"),
            budget("tag", "prod"),
        ]
    )
    found = book.applicable(SUBJECT, "llama")
    assert [(b.scope_kind, b.scope, b.model) for b in found] == [
        ("org", "etabA", None),
        ("team", "lab-nlp", "llama"),
        ("project", "p1", None),
        ("key", "k1", None),
        ("tag", "eval", None),
    ]
    assert len(book) == 9
    assert BudgetBook().applicable(SUBJECT, "llama") == ()


def test_increases_raise_the_cap_until_they_expire() -> None:
    b = Budget(
        "team",
        "t",
        None,
        "day",
        Money(1_000),
        increases=(Increase(Money(500), 100.0), Increase(Money(200), 200.0)),
    )
    assert b.effective_max(99.9) == Money(1_700)
    assert b.effective_max(100.0) == Money(1_200)
    assert b.effective_max(200.0) == Money(1_000)


def test_counter_keys_name_scope_model_and_period_unambiguously() -> None:
    plain = budget("team", "lab-nlp")
    odd = budget("team", "lab:nlp/x", "org/model:v1")
    assert plain.counter_key("2024-03") == "budget:team:lab-nlp:*:month:2024-03"
    assert odd.counter_key("2024-03") == "budget:team:lab%3Anlp%2Fx:org%2Fmodel%3Av1:month:2024-03"
    assert budget("team", "lab-nlp", "m").counter_key("x") != plain.counter_key("x")


def test_a_budget_describes_its_scope_for_the_caller() -> None:
    assert budget("team", "lab-nlp").describe() == "team 'lab-nlp'"
    assert budget("key", "k1", "llama").describe() == "key 'k1' for model 'llama'"


def test_negative_amounts_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        Budget("team", "t", None, "day", Money(-1))
    with pytest.raises(ValueError, match="negative"):
        Budget("team", "t", None, "day", Money(1), increases=(Increase(Money(-5), 1.0),))
