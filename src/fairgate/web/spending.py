"""What a person's keys spent this month, per day and per key (``fairgate.accounting.reports``).

    month = await month_spend(store, actor, now, {"01J…", "01K…"})
    month.days          # ((date(2026, 12, 1), micro), …) up to today, in UTC
    month.by_key["01J…"].cost_micro

The period is the current calendar month in UTC, ``[1st 00:00, tomorrow 00:00)``.
Only the given keys count (a team admin's report would include the team's
other keys); the report's own scope rules apply underneath. One report per day
(at most 31, each two small SQL sums) plus one for the month.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from fairgate.accounting.reports import spend
from fairgate.store import Store
from fairgate.store.usage_records import SpendRow
from fairgate.tenancy.actor import Actor

__all__ = ["MonthSpend", "month_spend"]


@dataclass(frozen=True, slots=True)
class MonthSpend:
    """The month so far: ``days`` (each day and its micro GPU-hours), ``by_key`` (the month's
    sums per key id; a key that spent nothing is absent), ``requests`` and ``cost_micro``."""

    start: date
    days: tuple[tuple[date, int], ...]
    by_key: dict[str, SpendRow]
    requests: int
    cost_micro: int


async def month_spend(
    store: Store, actor: Actor, now: datetime, key_ids: Collection[str]
) -> MonthSpend:
    """The month of ``now`` (UTC) for ``key_ids``, as ``actor`` may see it."""
    today = now.astimezone(UTC).date()
    first = today.replace(day=1)
    wanted = set(key_ids)
    by_key: dict[str, SpendRow] = {}
    days: list[tuple[date, int]] = []
    if wanted:
        month = await spend(store, actor, _at(first), _at(today + timedelta(days=1)), ("key",))
        by_key = {r.groups[0]: r for r in month.rows if r.groups[0] in wanted}
    day = first
    while day <= today:
        micro = 0
        if by_key:
            report = await spend(store, actor, _at(day), _at(day + timedelta(days=1)), ("key",))
            micro = sum(r.cost_micro for r in report.rows if r.groups[0] in wanted)
        days.append((day, micro))
        day += timedelta(days=1)
    return MonthSpend(
        start=first,
        days=tuple(days),
        by_key=by_key,
        requests=sum(r.requests for r in by_key.values()),
        cost_micro=sum(r.cost_micro for r in by_key.values()),
    )


def _at(day: date) -> datetime:
    return datetime.combine(day, time(0), UTC)
