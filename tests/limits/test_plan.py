"""How a demand becomes charges, and how a refused charge reads to the caller."""

from __future__ import annotations

from datetime import UTC
from zoneinfo import ZoneInfo

from fairgate.core.money import Money
from fairgate.limits import (
    Budget,
    Calendar,
    Demand,
    InFlightCharge,
    Limits,
    PeriodCharge,
    Subject,
    WindowCharge,
)
from fairgate.limits.budgets import Increase
from fairgate.limits.plan import Plan, Planner

NOW = 1_710_111_600.0  # 2024-03-10 23:00 UTC, 2024-03-11 00:00 in Paris
SUBJECT = Subject(key="k:1", org="o", team="t")


def plan_for(demand: Demand, zone: ZoneInfo | None = None) -> Plan:
    return Planner(Calendar(zone or UTC), grace=86_400.0).plan(demand, NOW)


def test_charges_run_rpm_tpm_rpd_in_flight_then_budgets() -> None:
    team = Budget("team", "t", None, "month", Money(5_000))
    demand = Demand(SUBJECT, Limits(60, 1_000, 500, 2), "m", 300, Money(40), (team,))
    plan = plan_for(demand, ZoneInfo("Europe/Paris"))
    rpm, tpm, rpd, slots, budget = plan.charges
    assert rpm == WindowCharge("rpm:k:1", 1, 60)
    assert tpm == WindowCharge("tpm:k:1", 300, 1_000)
    assert isinstance(rpd, PeriodCharge) and rpd.key == "rpd:k:1:2024-03-11"
    assert rpd.resets_at == NOW + 86_400 and rpd.keep_until == NOW + 2 * 86_400
    assert slots == InFlightCharge("inflight:k:1", 2)
    assert isinstance(budget, PeriodCharge)
    assert budget.key == "budget:team:t:*:month:2024-03"
    assert (budget.amount, budget.limit, budget.overdraft) == (40, 5_000, True)
    assert plan.tpm_keys == ("tpm:k:1",)
    assert plan.budgets == ((team, 4),)


def test_no_limits_and_no_budgets_charge_nothing() -> None:
    plan = plan_for(Demand(SUBJECT, Limits(), "m", 10, Money(1)))
    assert plan.charges == () and plan.tpm_keys == ()


def test_an_estimate_above_the_tpm_limit_is_charged_as_the_whole_limit() -> None:
    plan = plan_for(Demand(SUBJECT, Limits(tpm=1_000), "m", 16_384, Money(0)))
    assert plan.charges == (WindowCharge("tpm:k:1", 1_000, 1_000),)


def test_a_budget_listed_twice_is_charged_once_at_the_stricter_cap() -> None:
    loose = Budget("team", "t", None, "day", Money(900))
    strict = Budget("team", "t", None, "day", Money(300))
    plan = plan_for(Demand(SUBJECT, Limits(), "m", 1, Money(5), (loose, strict)))
    assert len(plan.charges) == 1
    assert plan.charges[0].limit == 300  # type: ignore[union-attr]


def test_refusals_name_the_limit_and_only_rates_carry_retry_after() -> None:
    team = Budget("team", "lab-nlp", "llama", "week", Money(1))
    demand = Demand(SUBJECT, Limits(7, 70, 700, 3), "llama", 1, Money(1), (team,))
    plan = plan_for(demand, ZoneInfo("Europe/Paris"))
    texts = [refuse(12.0) for refuse in plan.refusals]
    assert "7 requests per minute" in texts[0].message
    assert "70 tokens per minute" in texts[1].message
    assert "700 requests per day" in texts[2].message and "Europe/Paris" in texts[2].message
    assert "3 in flight" in texts[3].message
    assert [t.retry_after for t in texts[:4]] == [12.0] * 4
    spent = texts[4]
    assert "weekly budget of team 'lab-nlp' for model 'llama'" in spent.message
    assert "2024-03-11 00:00 UTC" in spent.message
    assert spent.retry_after is None and spent.headers() == []
    assert {t.status for t in texts} == {429}
    assert [t.code for t in texts] == [
        "rpm_limit_exceeded",
        "tpm_limit_exceeded",
        "rpd_limit_exceeded",
        "in_flight_limit_exceeded",
        "budget_exceeded",
    ]


def test_team_totals_follow_the_keys_limits_and_share_one_counter_per_team() -> None:
    budget = Budget("org", "o", None, "day", Money(100))
    totals = Limits(600, 10_000, 5_000, 8)
    demand = Demand(SUBJECT, Limits(rpm=60), "m", 300, Money(1), (budget,), totals)
    plan = plan_for(demand, ZoneInfo("Europe/Paris"))
    keys = [charge.key for charge in plan.charges]
    assert keys == [
        "rpm:k:1",
        "team-rpm:t",
        "team-tpm:t",
        "team-rpd:t:2024-03-11",
        "team-inflight:t",
        "budget:org:o:*:day:2024-03-10",
    ]
    assert plan.charges[2] == WindowCharge("team-tpm:t", 300, 10_000)
    assert plan.tpm_keys == ("team-tpm:t",)  # corrected with the real tokens at settle
    other_key = Demand(
        Subject(key="k:2", org="o", team="t"), Limits(), "m", 1, Money(0), (), totals
    )
    assert plan_for(other_key).charges[0].key == "team-rpm:t"  # the same counter
    texts = [refuse(3.0) for refuse in plan.refusals]
    assert [t.code for t in texts[:5]] == [
        "rpm_limit_exceeded",
        "team_rpm_limit_exceeded",
        "team_tpm_limit_exceeded",
        "team_rpd_limit_exceeded",
        "team_in_flight_limit_exceeded",
    ]
    assert texts[1].message == (
        "Rate limit exceeded: team 't' (all its keys together) may send 600 requests per minute."
    )
    assert "team 't'" in texts[4].message and "8 in flight" in texts[4].message


# One planner serves every request: what it keeps from one plan to the next must never
# leak a request's amounts into another's, nor outlive the period it was made in.


def test_each_request_of_one_key_is_charged_its_own_estimate_and_cost() -> None:
    planner = Planner(Calendar(UTC), grace=86_400.0)
    team = Budget("team", "t", None, "month", Money(5_000))
    limits = Limits(60, 1_000, 500, 2)
    first = planner.plan(Demand(SUBJECT, limits, "m", 300, Money(40), (team,), limits), NOW)
    second = planner.plan(Demand(SUBJECT, limits, "m", 7, Money(2), (team,), limits), NOW + 1)
    free = planner.plan(Demand(SUBJECT, limits, "m", 1, Money(0), (team,), limits), NOW + 2)
    amounts = [[c.amount for c in p.charges if not isinstance(c, InFlightCharge)]
               for p in (first, second, free)]  # fmt: skip
    # rpm, tpm, rpd, then the team's rpm, tpm, rpd, then the budget
    assert amounts == [[1, 300, 1, 1, 300, 1, 40], [1, 7, 1, 1, 7, 1, 2], [1, 1, 1, 1, 1, 1, 0]]


def test_a_plan_after_midnight_charges_the_new_days_counters() -> None:
    planner = Planner(Calendar(ZoneInfo("Europe/Paris")), grace=86_400.0)
    day = Budget("key", "k:1", None, "day", Money(5_000))
    demand = Demand(SUBJECT, Limits(rpd=500), "m", 1, Money(3), (day,))
    before = planner.plan(demand, NOW - 1)  # 23:59:59 in Paris, 22:59:59 UTC
    after = planner.plan(demand, NOW)  # midnight in Paris
    late = planner.plan(demand, NOW + 3_600)  # midnight UTC
    keys = [[c.key for c in p.charges] for p in (before, after, late)]
    assert keys == [
        ["rpd:k:1:2024-03-10", "budget:key:k%3A1:*:day:2024-03-10"],
        ["rpd:k:1:2024-03-11", "budget:key:k%3A1:*:day:2024-03-10"],
        ["rpd:k:1:2024-03-11", "budget:key:k%3A1:*:day:2024-03-11"],
    ]
    assert late.charges[1].resets_at == NOW + 3_600 + 86_400  # type: ignore[union-attr]


def test_a_budget_increase_counts_until_it_expires_then_the_cap_falls_back() -> None:
    planner = Planner(Calendar(UTC), grace=86_400.0)
    raised = Budget(
        "team", "t", None, "month", Money(100), increases=(Increase(Money(50), NOW + 10),)
    )
    demand = Demand(SUBJECT, Limits(), "m", 1, Money(1), (raised,))
    caps = [planner.plan(demand, now).charges[0].limit for now in (NOW, NOW + 10)]  # type: ignore[union-attr]
    assert caps == [150, 100]


def test_changed_limits_of_a_key_are_charged_from_the_next_request() -> None:
    planner = Planner(Calendar(UTC), grace=86_400.0)
    planner.plan(Demand(SUBJECT, Limits(rpm=60), "m", 1, Money(0)), NOW)
    plan = planner.plan(Demand(SUBJECT, Limits(rpm=10), "m", 1, Money(0)), NOW + 1)
    assert plan.charges == (WindowCharge("rpm:k:1", 1, 10),)
    message = plan.refusals[0](3.0).message
    assert "10 requests per minute" in message
