"""Calendar periods: the day, ISO week or month that holds a moment, in one time zone.

    span = Calendar(ZoneInfo("Europe/Paris")).span("day", 1710111600.0)  # 2024-03-11 00:00 Paris
    span.label == "2024-03-11"; span.end - span.start == 86400.0
    Calendar().span("week", 1710111600.0).label == "2024-W10"   # UTC: still Sunday 23:00

Labels name the period inside counter keys: ``YYYY-MM-DD``, ``YYYY-Www`` (ISO
week, Monday first), ``YYYY-MM``. Days follow the zone's wall clock, so a day
across a DST change lasts 23 or 25 hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Literal

__all__ = ["Calendar", "PeriodKind", "PeriodSpan"]

PeriodKind = Literal["day", "week", "month"]


@dataclass(frozen=True, slots=True)
class PeriodSpan:
    """One calendar period: ``start <= t < end`` in Unix seconds, and its label."""

    kind: PeriodKind
    label: str
    start: float
    end: float

    def holds(self, now: float) -> bool:
        return self.start <= now < self.end


class Calendar:
    """Periods in one zone (default UTC), remembering the latest span of each kind so
    that the hot path computes a date only when a period rolls over."""

    def __init__(self, zone: tzinfo = UTC) -> None:
        self.zone = zone
        self._last: dict[PeriodKind, PeriodSpan] = {}

    def span(self, kind: PeriodKind, now: float) -> PeriodSpan:
        last = self._last.get(kind)
        if last is not None and last.holds(now):
            return last
        span = self._compute(kind, now)
        self._last[kind] = span
        return span

    def _compute(self, kind: PeriodKind, now: float) -> PeriodSpan:
        day = datetime.fromtimestamp(now, self.zone).date()
        if kind == "day":
            first, after = day, day + timedelta(days=1)
            label = first.isoformat()
        elif kind == "week":
            first = day - timedelta(days=day.weekday())
            after = first + timedelta(days=7)
            year, week, _ = first.isocalendar()
            label = f"{year}-W{week:02d}"
        else:
            first = day.replace(day=1)
            after = (first + timedelta(days=32)).replace(day=1)
            label = f"{first.year:04d}-{first.month:02d}"
        return PeriodSpan(kind, label, self._midnight(first), self._midnight(after))

    def _midnight(self, day: date) -> float:
        return datetime.combine(day, time(), tzinfo=self.zone).timestamp()
