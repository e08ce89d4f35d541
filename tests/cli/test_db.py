"""``fairgate db upgrade`` as an operator runs it: its output never carries the DSN."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from cli.test_tenancy_cli import fairgate
from store.backends import pg_store_url

__all__ = ["pg_store_url"]

_SECRET = "q-secret-" + secrets.token_hex(4)


def _config(tmp_path: Path, url: str) -> Path:
    secret = tmp_path / "db.url"
    secret.write_text(url)
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "store: {url_file: db.url}\n"
        "models:\n"
        "  - name: m\n"
        '    upstreams: [{name: u, url: "http://127.0.0.1:9"}]\n'
    )
    return path


def _leaks(output: str, url: str) -> list[str]:
    parsed = make_url(url)
    parts = [_SECRET, "password", "?", f"{parsed.username}@", *parsed.query.values()]
    return [part for part in parts if part in output]


@pytest.mark.postgres
def test_db_upgrade_on_postgresql_never_prints_the_user_or_the_query(
    pg_store_url: str, tmp_path: Path
) -> None:
    # The server trusts loopback, so the query's password is accepted and ignored.
    url = f"{pg_store_url}?password={_SECRET}&ssl=disable"
    done = fairgate(_config(tmp_path, url), "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert "is at revision" in done.stdout
    assert _leaks(done.stdout + done.stderr, url) == []


def test_db_upgrade_failing_to_reach_the_store_never_prints_the_dsn(tmp_path: Path) -> None:
    url = f"postgresql://operator@127.0.0.1:9/fairgate?password={_SECRET}"
    done = fairgate(_config(tmp_path, url), "db", "upgrade")
    assert done.returncode != 0
    assert "store unavailable" in done.stderr
    assert _leaks(done.stdout + done.stderr, url) == []


def test_an_option_the_driver_refuses_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    url = f"postgresql://operator@127.0.0.1:9/fairgate?password={_SECRET}&sslmode=require"
    done = fairgate(_config(tmp_path, url), "db", "upgrade")
    assert done.returncode == 1
    assert "holds an option the driver refuses" in done.stderr
    assert "Traceback" not in done.stderr
    assert _leaks(done.stdout + done.stderr, url) == []
