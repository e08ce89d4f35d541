"""The simulation's figures: the mechanism works, and the control run shows it is the cause."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fairgate.fairshare.simulation import SCENARIOS, Report, Scenario, format_report, run

BY_NAME = {s.name: s for s in SCENARIOS}


@pytest.fixture(scope="module")
def reports() -> dict[str, Report]:
    return {s.name: run(s) for s in SCENARIOS}


def test_a_lone_organisation_fills_the_pool(reports: dict[str, Report]) -> None:
    for name in ("A alone", "B alone"):
        report = reports[name]
        assert report.kv_utilisation >= 0.95
        # Borrowing lets it run far more than its reservation (13 or 3).
        (org,) = report.orgs.values()
        assert org.mean_running > 2 * org.reservation


def test_both_saturating_b_gets_its_share_not_its_client_count(
    reports: dict[str, Report],
) -> None:
    fair = reports["both saturating, B after A"]
    control = reports["control: every request at priority 0"]
    assert fair.orgs["B"].running_fraction == pytest.approx(0.1875, abs=0.03)
    assert fair.orgs["A"].running_fraction == pytest.approx(0.8125, abs=0.03)
    # Without the gateway's priorities B gets its fraction of the clients.
    assert control.orgs["B"].running_fraction == pytest.approx(0.5, abs=0.05)


def test_every_preemption_hits_a_borrower(reports: dict[str, Report]) -> None:
    for name in ("A alone", "B alone", "both saturating, B after A", "C = 10"):
        report = reports[name]
        assert report.preempted_borrowing > 0  # the pool really was under pressure
        assert report.preempted_within_share == 0


def test_within_share_requests_run_at_once_and_keep_the_reservation_busy(
    reports: dict[str, Report],
) -> None:
    fair = reports["both saturating, B after A"]
    for org in fair.orgs.values():
        assert org.max_within_share == org.reservation
        assert org.mean_running_within_share == pytest.approx(org.reservation, rel=0.05)
        assert org.wait_within_share * 20 < org.wait_borrowing


def test_counting_all_requests_in_flight_loses_the_reservation(
    reports: dict[str, Report],
) -> None:
    rejected = reports["rejected rule: all in flight counted"]
    fair = reports["both saturating, B after A"]
    # Once more requests are in flight than reserved, nothing is ever within share again.
    assert rejected.orgs["B"].mean_running_within_share < 0.1
    assert fair.orgs["B"].mean_running_within_share > 2.5


def test_a_small_pool_never_holds_more_within_share_requests_than_reserved(
    reports: dict[str, Report],
) -> None:
    small = reports["C = 10"]
    assert {o.name: o.reservation for o in small.orgs.values()} == {"A": 8, "B": 2}
    assert small.orgs["A"].max_within_share == 8
    assert small.orgs["B"].max_within_share == 2


def test_runs_are_deterministic_per_seed() -> None:
    short = replace(BY_NAME["both saturating, B after A"], steps=3_000, measure_from=2_500)
    assert run(short) == run(short)
    assert run(short) != run(replace(short, seed=2))


def test_the_report_prints_one_line_per_organisation(reports: dict[str, Report]) -> None:
    text = format_report(reports["C = 10"])
    lines = text.splitlines()
    assert lines[0].startswith("C = 10: KV utilisation")
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["A", "B"]


def test_scenarios_are_named_uniquely() -> None:
    assert len(BY_NAME) == len(SCENARIOS)
    assert all(isinstance(s, Scenario) for s in SCENARIOS)
