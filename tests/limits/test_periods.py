"""Calendar periods: days in a zone, ISO weeks and months in UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from fairgate.limits import Calendar

PARIS = ZoneInfo("Europe/Paris")


def at(text: str, zone: ZoneInfo | None = None) -> float:
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=zone or UTC).timestamp()


def test_a_day_follows_the_zone_not_utc() -> None:
    paris = Calendar(PARIS)
    late = paris.span("day", at("2024-03-10T23:30:00"))  # 00:30 on the 11th in Paris
    assert late.label == "2024-03-11"
    assert late.start == at("2024-03-11T00:00:00", PARIS)
    assert Calendar().span("day", at("2024-03-10T23:30:00")).label == "2024-03-10"


@pytest.mark.parametrize(
    ("day", "hours"), [("2024-03-31", 23), ("2024-10-27", 25), ("2024-06-01", 24)]
)
def test_days_across_daylight_saving_changes_last_as_long_as_the_wall_clock_says(
    day: str, hours: int
) -> None:
    span = Calendar(PARIS).span("day", at(f"{day}T12:00:00", PARIS))
    assert span.label == day
    assert span.end - span.start == hours * 3600


@pytest.mark.parametrize(
    ("moment", "label", "monday"),
    [
        ("2024-03-10T23:59:59", "2024-W10", "2024-03-04"),  # a Sunday
        ("2024-03-11T00:00:00", "2024-W11", "2024-03-11"),
        ("2024-12-31T12:00:00", "2025-W01", "2024-12-30"),  # ISO year differs
        ("2021-01-03T12:00:00", "2020-W53", "2020-12-28"),
    ],
)
def test_iso_weeks_start_on_monday(moment: str, label: str, monday: str) -> None:
    span = Calendar().span("week", at(moment))
    assert span.label == label
    assert span.start == at(f"{monday}T00:00:00")
    assert span.end - span.start == 7 * 86400


@pytest.mark.parametrize(
    ("moment", "label", "end"),
    [
        ("2024-02-29T23:59:59", "2024-02", "2024-03-01"),
        ("2024-12-31T23:59:59", "2024-12", "2025-01-01"),
        ("2025-01-01T00:00:00", "2025-01", "2025-02-01"),
    ],
)
def test_months_end_where_the_next_one_starts(moment: str, label: str, end: str) -> None:
    span = Calendar().span("month", at(moment))
    assert span.label == label
    assert span.end == at(f"{end}T00:00:00")
    assert span.holds(at(moment)) and not span.holds(span.end)


def test_the_remembered_span_is_replaced_when_the_period_rolls_over() -> None:
    calendar = Calendar()
    first = calendar.span("day", at("2024-05-01T23:59:59"))
    assert calendar.span("day", at("2024-05-01T00:00:00")) is first
    assert calendar.span("day", at("2024-05-02T00:00:00")).label == "2024-05-02"
    assert calendar.span("day", at("2024-04-30T12:00:00")).label == "2024-04-30"
