"""``fairgate audit list|verify`` as an operator runs them, on SQLite and PostgreSQL.

The tamper tests change the database the way someone with write access would (an
UPDATE or DELETE on the table, outside the gateway) and expect ``verify`` to name the
event where the chain breaks, with exit status 1.
"""

from __future__ import annotations

import asyncio
import getpass
import secrets
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import orjson
import pytest
from sqlalchemy import delete, update
from sqlalchemy.engine import make_url

from cli.test_tenancy_cli import fairgate
from fairgate.store import Store
from fairgate.store.tables import audit_events
from store.backends import _admin_dsn, _create_database, _drop_database

_CONFIG = """
store: {{url: "{url}"}}
orgs:
  - {{name: etabA, share: 0.6, teams: [lab-nlp]}}
models:
  - name: llama-8b
    upstreams: [{{name: u, url: "http://127.0.0.1:9"}}]
"""


@dataclass(frozen=True)
class Seed:
    """A store holding the configuration's events and three keys created through the CLI."""

    url: str  # SQLite: the file's URL; PostgreSQL: the template database's
    pg_url: str | None


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def seed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seed]:
    """Seeded once per store (a CLI call is a process of a few seconds); each test reads or
    tampers with a copy of its own."""
    folder = tmp_path_factory.mktemp("audit-seed")
    pg_url: str | None = None
    if request.param == "sqlite":
        url = f"sqlite:///{folder}/seed.db"
    else:
        pg_url = request.getfixturevalue("pg_url")
        name = f"fairgate_test_{secrets.token_hex(6)}"
        asyncio.run(_create_database(pg_url, name))
        url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    config = folder / "gateway.yaml"
    config.write_text(_CONFIG.format(url=url))
    try:
        for name in ("one", "two", "three"):
            created = fairgate(config, "keys", "create", "--team", "lab-nlp", "--name", name)
            assert created.returncode == 0, created.stderr
        yield Seed(url, pg_url)
    finally:
        if pg_url is not None:
            asyncio.run(_drop_database(pg_url, make_url(url).database or ""))


@pytest.fixture
def store_url(seed: Seed, tmp_path: Path) -> Iterator[str]:
    """A copy of the seeded store for one test (SQLite's backup API; PostgreSQL's template)."""
    if seed.pg_url is None:
        copy = tmp_path / "fairgate.db"
        source, target = sqlite3.connect(make_url(seed.url).database or ""), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        yield f"sqlite:///{copy}"
        return
    name = f"fairgate_test_{secrets.token_hex(6)}"
    template = make_url(seed.url).database
    asyncio.run(_run_admin(seed.pg_url, f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    try:
        yield make_url(seed.pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_drop_database(seed.pg_url, name))


@pytest.fixture
def config(tmp_path: Path, store_url: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(_CONFIG.format(url=store_url))
    return path


async def _run_admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(_admin_dsn(url), timeout=10)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def _events(config: Path, *args: str) -> list[dict[str, object]]:
    listed = fairgate(config, "audit", "list", "--json", *args)
    assert listed.returncode == 0, listed.stderr
    events: list[dict[str, object]] = orjson.loads(listed.stdout)
    return events


def _tamper(url: str, statement: object) -> None:
    async def run() -> None:
        store = Store(url)
        await store.connect()
        try:
            async with store.write() as conn:
                await conn.execute(statement)  # type: ignore[call-overload]
        finally:
            await store.close()

    asyncio.run(run())


def _middle_key_event(config: Path) -> tuple[dict[str, object], dict[str, object]]:
    """The second of the three ``key.created`` events, and the event right after it."""
    everything = _events(config)  # one CLI call: the filters have their own test
    victim = [e for e in everything if e["action"] == "key.created"][1]
    following = next(e for e in everything if e["seq"] == victim["seq"] + 1)  # type: ignore[operator]
    return victim, following


def test_list_shows_the_events_newest_first_and_filters_by_actor_and_action(
    config: Path,
) -> None:
    everything = _events(config)
    assert [e["seq"] for e in everything] == sorted((e["seq"] for e in everything), reverse=True)
    mine = _events(config, "--actor", f"operator:{getpass.getuser()}")
    assert [e["action"] for e in mine] == ["key.created"] * 3
    assert {e["actor"] for e in _events(config, "--action", "org.created")} == {"system:config"}
    assert _events(config, "--since", "2999-01-01") == []
    assert len(_events(config, "--since", "1h")) == len(everything)
    table = fairgate(config, "audit", "list")
    assert table.returncode == 0 and "key.created" in table.stdout


def test_verify_reports_an_intact_chain_with_its_head(config: Path) -> None:
    checked = fairgate(config, "audit", "verify", "--json")
    assert checked.returncode == 0, checked.stderr
    report = orjson.loads(checked.stdout)
    newest = _events(config, "--limit", "1")[0]
    assert report == {"intact": True, "events": newest["seq"], "head": newest["hash"]}


def test_verify_names_the_event_whose_detail_was_changed_in_the_database(
    config: Path, store_url: str
) -> None:
    victim = _middle_key_event(config)[0]["id"]
    _tamper(
        store_url,
        update(audit_events).where(audit_events.c.id == victim).values(detail={"models": None}),
    )
    checked = fairgate(config, "audit", "verify")
    assert checked.returncode == 1
    assert f"broken at event {victim} " in checked.stderr
    assert "content changed" in checked.stderr


def test_verify_names_the_gap_a_deleted_middle_event_leaves(config: Path, store_url: str) -> None:
    victim, following = _middle_key_event(config)
    _tamper(store_url, delete(audit_events).where(audit_events.c.id == victim["id"]))
    checked = fairgate(config, "audit", "verify", "--json")
    assert checked.returncode == 1
    report = orjson.loads(checked.stdout)
    assert (report["event_id"], report["problem"]) == (following["id"], "event_missing")
    assert f"seq {victim['seq']} " in report["message"]


def test_a_bad_since_is_refused_with_a_reason(config: Path) -> None:
    refused = fairgate(config, "audit", "list", "--since", "yesterday-ish")
    assert refused.returncode == 1
    assert "--since" in refused.stderr
