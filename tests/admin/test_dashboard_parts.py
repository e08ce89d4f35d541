"""The dashboard's parts on their own: the decision ring, the sampled history, the SVG chart."""

from __future__ import annotations

from typing import Any

import pytest

from fairgate.admin.dashboard import DecisionRing, Point, ShareHistory
from fairgate.admin.dashboard.charts import share_chart
from fairgate.limits import StateUnavailable
from fairgate.routing import Decision
from store.backends import FakeClock


def _decision(model: str, replica: str) -> Decision:
    return Decision("chat", model, replica, (), {"queue-depth": {replica: 1.0}}, {replica: 1.0}, 0)


def _report(at: float, within: int, borrowing: int, *, pool: str = "p", org: str = "A") -> Any:
    row = {
        "org": org,
        "share": 0.5,
        "within_share_in_flight": within,
        "this_gateway": {"borrowing_in_flight": borrowing},
    }
    return {"at": at, "pools": [{"pool": pool, "capacity": 4, "orgs": [row]}]}


def test_the_ring_keeps_the_newest_decisions_newest_first_and_is_bounded() -> None:
    clock = FakeClock()
    ring = DecisionRing(3, clock)
    for i in range(5):
        ring.observe(_decision("m" if i % 2 == 0 else "n", f"r{i}"))
    kept = ring.latest()
    assert [d.replica for _, d in kept] == ["r4", "r3", "r2"]
    assert [d.replica for _, d in ring.latest({"m"})] == ["r4", "r2"]
    with pytest.raises(ValueError):
        DecisionRing(0, clock)


def test_a_sample_is_running_over_capacity_against_the_share() -> None:
    history = ShareHistory(lambda: _never(), interval=5, window=60)
    history.record(_report(100.0, 2, 1))
    assert history.series("p", "A") == [Point(100.0, 0.75, 0.5)]
    assert history.series("p", "B") == []


def test_the_history_is_bounded_in_points_time_and_series() -> None:
    history = ShareHistory(lambda: _never(), interval=5, window=60, max_series=2)
    for i in range(100):
        history.record(_report(1000.0 + 5 * i, 1, 0))
    points = history.series("p", "A")
    assert len(points) <= 60 / 5 + 1
    assert points[0].at >= points[-1].at - 60
    for org in ("B", "C", "D"):
        history.record(_report(1500.0, 1, 0, org=org))
    assert history.series("p", "B") and not history.series("p", "C")  # the third series waits
    history.record(_report(5000.0, 0, 0, org="B"))  # an hour later A's points are gone
    assert history.series("p", "A") == []


async def test_a_failed_sample_leaves_a_gap_and_the_loop_alive() -> None:
    calls = 0

    async def failing() -> Any:
        nonlocal calls
        calls += 1
        raise StateUnavailable("redis down")

    history = ShareHistory(failing, interval=5, window=60)
    await history.sample()
    assert calls == 1 and history.series("p", "A") == []


async def _never() -> Any:
    raise AssertionError("not called")


def test_the_chart_escapes_its_label_and_draws_both_lines() -> None:
    points = [Point(100.0, 0.2, 0.5), Point(105.0, 1.4, 0.5)]
    svg = share_chart(points, now=105.0, window=60.0, label='<script>alert("x")</script>')
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'class="running"' in svg and 'class="share"' in svg
    # y reaches the highest value (1.4): the newest running point is at the top edge
    assert "318.0,2.0" in svg
    assert "collecting" in share_chart(points[:1], now=105.0, window=60.0)
