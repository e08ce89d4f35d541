"""Timestamps stored in UTC on both back ends, read back as aware ``datetime`` in UTC.

PostgreSQL keeps them as ``timestamptz``. SQLite has no date type: SQLAlchemy writes
a fixed-width text (``YYYY-MM-DD HH:MM:SS.ffffff``), so the values are converted
to naive UTC before writing, which keeps text comparisons in SQL chronological.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

__all__ = ["UtcDateTime", "from_unix", "to_unix"]


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp column that accepts only aware datetimes and returns them in UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None:
            raise ValueError("timestamps must be aware datetimes (UTC)")
        moment: datetime = value.astimezone(UTC)
        return moment.replace(tzinfo=None) if dialect.name == "sqlite" else moment

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        moment: datetime = value
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)


def from_unix(seconds: float) -> datetime:
    """Unix seconds as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def to_unix(moment: datetime | None) -> float | None:
    """An aware datetime as Unix seconds; None stays None."""
    return None if moment is None else moment.timestamp()
