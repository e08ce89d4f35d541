"""Store URLs as the configuration writes them, turned into SQLAlchemy async URLs.

    sqlite:///fairgate.db             → sqlite+aiosqlite:///<base_dir>/fairgate.db
    sqlite:////var/lib/fairgate.db    → sqlite+aiosqlite:////var/lib/fairgate.db
    postgresql://user@host/db         → postgresql+asyncpg://user@host/db

A relative SQLite path is resolved against ``base_dir`` (the configuration
file's directory), like every other path in the configuration, so the database
does not move with the working directory. An in-memory SQLite database is
refused: every connection would see a different, empty database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["Dialect", "StoreURL"]

Dialect = Literal["sqlite", "postgresql"]

_DRIVERS: dict[str, tuple[Dialect, str]] = {
    "sqlite": ("sqlite", "sqlite+aiosqlite"),
    "sqlite+aiosqlite": ("sqlite", "sqlite+aiosqlite"),
    "postgresql": ("postgresql", "postgresql+asyncpg"),
    "postgres": ("postgresql", "postgresql+asyncpg"),
    "postgresql+asyncpg": ("postgresql", "postgresql+asyncpg"),
}


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A parsed store URL: its dialect and the async SQLAlchemy URL to connect with.

    ``str()`` and ``repr()`` name the store (dialect, host, port, database) and never
    show the DSN: no user, no password, no query (which may hold ``?password=``),
    so the object may be logged or printed.
    """

    dialect: Dialect
    url: URL = field(repr=False)

    @classmethod
    def parse(cls, text: str, *, base_dir: Path | None = None) -> StoreURL:
        """``ValueError`` with a readable reason for anything but SQLite or PostgreSQL."""
        try:
            url = make_url(text.strip())
        except ArgumentError:
            raise ValueError("not a store URL: expected sqlite:///PATH or postgresql://…") from None
        known = _DRIVERS.get(url.drivername)
        if known is None:
            raise ValueError(
                f"unsupported store URL scheme {url.drivername!r}: use sqlite:/// or postgresql://"
            )
        dialect, driver = known
        url = url.set(drivername=driver)
        if dialect == "sqlite":
            url = url.set(database=_sqlite_path(url.database, base_dir))
        return cls(dialect, url)

    def __str__(self) -> str:
        if self.dialect == "sqlite":
            return f"sqlite {self.url.database}"
        port = f":{self.url.port}" if self.url.port is not None else ""
        host = self.url.host or "(local socket)"
        return f"postgresql {self.url.database or '(default database)'} on {host}{port}"


def _sqlite_path(database: str | None, base_dir: Path | None) -> str:
    if not database or database == ":memory:" or database.startswith("file:"):
        raise ValueError("an SQLite store needs a file path: sqlite:///PATH")
    path = Path(database)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path)
