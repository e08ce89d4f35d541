"""The in-process simulation: the high band stays near idle under a flood only with admission."""

from __future__ import annotations

from dataclasses import replace

from fairgate.admission.simulation import SCENARIOS, Scenario, format_report, run

# The documented scenarios, shortened: the figures settle well within two minutes.
SHORT = {s.name: replace(s, duration=120.0, warmup=30.0) for s in SCENARIOS}


def test_admission_keeps_the_high_band_near_idle_and_its_absence_does_not() -> None:
    idle = run(SHORT["idle: platinum alone"])
    on = run(SHORT["admission on: platinum + 500 bronze"])
    off = run(SHORT["admission off: everything straight to the engine"])
    assert len(idle.high_latencies) > 50 and len(on.high_latencies) > 50
    assert on.high_percentile(99) <= 1.5 * idle.high_percentile(99)
    assert off.high_percentile(99) > 5 * idle.high_percentile(99)
    # and the load is real: bronze keeps its share of the batch busy, without refusals
    assert on.low_throughput > 0.7 * 32 * 0.8 / 1.0
    assert on.low_refused == 0 and off.low_throughput > on.low_throughput
    assert "x idle" in format_report(on, idle)


def test_a_held_band_at_ceiling_one_also_stays_near_idle() -> None:
    idle = run(SHORT["idle: platinum alone"])
    gold = run(SHORT["admission on: gold + 500 bronze"])
    assert gold.high_percentile(99) <= 1.5 * idle.high_percentile(99)


def test_a_run_is_deterministic() -> None:
    small = Scenario("small", low_clients=40, duration=40.0, warmup=5.0)
    first, second = run(small), run(small)
    assert first.high_latencies == second.high_latencies
    assert first.low_completed == second.low_completed
