"""Store URLs as an operator writes them, and what the store connects to."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgate.store import StoreURL


def test_a_relative_sqlite_path_is_resolved_against_the_configuration_directory() -> None:
    url = StoreURL.parse("sqlite:///fairgate.db", base_dir=Path("/etc/fairgate"))
    assert url.dialect == "sqlite"
    assert url.url.drivername == "sqlite+aiosqlite"
    assert url.url.database == "/etc/fairgate/fairgate.db"


def test_an_absolute_sqlite_path_stays_where_it_is() -> None:
    url = StoreURL.parse("sqlite:////var/lib/fairgate.db", base_dir=Path("/etc/fairgate"))
    assert url.url.database == "/var/lib/fairgate.db"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+asyncpg"])
def test_postgresql_urls_use_asyncpg(scheme: str) -> None:
    url = StoreURL.parse(f"{scheme}://gw@db.example.org:5432/fairgate")
    assert url.dialect == "postgresql"
    assert url.url.drivername == "postgresql+asyncpg"
    assert url.url.host == "db.example.org"


def test_a_password_never_shows_when_the_url_is_printed() -> None:
    url = StoreURL.parse("postgresql://gw:hunter2-secret@db/fairgate")
    assert "hunter2-secret" not in str(url)
    assert "hunter2-secret" not in repr(url.dialect)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("mysql://db/x", "unsupported store URL scheme"),
        ("sqlite://", "needs a file path"),
        ("sqlite:///:memory:", "needs a file path"),
        ("not a url", "not a store URL"),
    ],
)
def test_other_urls_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        StoreURL.parse(text)
