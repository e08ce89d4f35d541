"""Whole processes: simulated engines and the gateway, started per test, stopped after.

def test_x(start_sim, start_gateway):
    sim = start_sim("--speed", "0")
    gw = start_gateway(models=[model("m", sim)])
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=TEST_KEY)

Every configuration ``write_config`` writes has a SQLite store in its directory
holding one key, ``TEST_KEY``, in team ``t`` of org ``test-org`` with no model
restriction; ``AUTH`` is the header that presents it.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import orjson
import pytest
import sqlalchemy as sa

from fairgate.auth import sha256
from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.store import tables
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor

if TYPE_CHECKING:
    from tests.e2e.fleet_helpers import Fleet

# A fixed key so raw-socket helpers can present it without knowing the gateway.
TEST_KEY = "fg-" + "e2eTestKey0" * 3 + "e2eTestKew"
AUTH = {"authorization": f"Bearer {TEST_KEY}"}

StartSim = Callable[..., SimProcess]
StartGateway = Callable[..., GatewayProcess]


HEAVIEST_FIRST = {"scorers": {"weight": 1}}
"""A routing strategy that always tries the heaviest replica not tried yet (tests that need
to know which replica a request reaches first)."""


def model(name: str, *sims: SimProcess, **extra: Any) -> dict[str, Any]:
    """A model entry whose upstreams are the given simulators (named r0, r1, …)."""
    entry: dict[str, Any] = {"name": name, "engine": "vllm"}
    entry.update(extra)
    entry.setdefault("upstreams", [{"name": f"r{i}", "url": sim.url} for i, sim in enumerate(sims)])
    return entry


def write_config(directory: Path, models: list[dict[str, Any]], **sections: Any) -> Path:
    """A gateway config on free loopback ports; JSON is valid YAML."""
    document: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "admin_listen": {"host": "127.0.0.1", "port": 0},
        "health": {"interval": "1s", "timeout": "1s"},
        "store": {"url": "sqlite:///fairgate.db"},
        "orgs": [{"name": "test-org", "share": 1.0, "teams": ["t"]}],
        "models": models,
    }
    for key, value in sections.items():
        if key != "store" and isinstance(value, dict) and isinstance(document.get(key), dict):
            document[key] = {**document[key], **value}
        else:
            document[key] = value
    path = directory / "gateway.yaml"
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
    asyncio.run(_provision(path))
    return path


async def _provision(path: Path) -> None:
    """Create the store with TEST_KEY in team t (the secret swapped for the fixed one)."""
    async with open_tenancy(load_config(path)) as tenancy:
        if await tenancy.keys.list(Actor.operator("tests"), team="t"):
            return
        created = await tenancy.keys.create(Actor.operator("tests"), team="t", name="e2e")
        async with tenancy.store.write() as conn:
            await conn.execute(
                sa.update(tables.keys)
                .where(tables.keys.c.id == created.key.id)
                .values(secret_sha256=sha256(TEST_KEY), prefix=TEST_KEY[:11])
            )


def admin_call(gateway: GatewayProcess, master: str, method: str, path: str, **body: Any) -> Any:
    """One admin API call with the master key, ``body`` as its JSON; asserts it succeeded
    and returns the answer's JSON."""
    answer = httpx.request(
        method,
        gateway.admin_url + path,
        json=body or None,
        headers={"authorization": f"Bearer {master}"},
        timeout=30,
    )
    assert answer.status_code < 300, answer.text
    return answer.json()


def add_key(config: Path, team: str, **options: Any) -> str:
    """A new key in ``team`` of the store ``config`` names; returns its secret.
    ``options`` go to ``Keys.create`` (``project``, ``tags``, ``limits``, …)."""

    async def create() -> str:
        async with open_tenancy(load_config(config)) as tenancy:
            created = await tenancy.keys.create(Actor.operator("tests"), team=team, **options)
            return created.secret

    return asyncio.run(create())


def state_section(backend: str, directory: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``state`` section for ``backend``: the memory back end, or the test Redis
    under a prefix of its own (the URL in a file in ``directory``)."""
    if backend == "memory":
        return {"backend": "memory"}
    url_file = directory / "redis-url"
    url_file.write_text(request.getfixturevalue("redis_url"))
    return {
        "backend": "redis",
        "url_file": str(url_file),
        "prefix": f"fg-test:{os.urandom(6).hex()}:",
    }


@pytest.fixture
def redis_state(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A ``state`` section on the test Redis, under a prefix of this test's own."""
    return state_section("redis", tmp_path, request)


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The ``state`` section: the memory back end, or the test Redis under a fresh prefix."""
    if request.param == "memory":
        return {"backend": "memory"}
    redis: dict[str, Any] = request.getfixturevalue("redis_state")
    return redis


@pytest.fixture
def start_sim() -> Iterator[StartSim]:
    started: list[SimProcess] = []

    def start(*args: str) -> SimProcess:
        sim = SimProcess(*args).start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[StartGateway]:
    started: list[GatewayProcess] = []

    def start(
        models: list[dict[str, Any]],
        *args: str,
        env: dict[str, str] | None = None,
        stderr: Path | None = None,
        **sections: Any,
    ) -> GatewayProcess:
        directory = tmp_path / f"gw{len(started)}"
        directory.mkdir()
        config = write_config(directory, models, **sections)
        gateway = GatewayProcess(config, *args, env=env, stderr=stderr)
        gateway.start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


async def _on_server(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _database_url(pg_url: str, name: str) -> str:
    parts = urllib.parse.urlsplit(pg_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def _drop(pg_url: str, name: str) -> None:
    asyncio.run(
        _on_server(
            pg_url,
            f"ALTER DATABASE {name} ALLOW_CONNECTIONS true",
            f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
            f"DROP DATABASE IF EXISTS {name}",
        )
    )


@pytest.fixture
def pg_database(pg_url: str, pg_template: str) -> Iterator[str]:
    """A migrated, empty database of its own on the PostgreSQL server, dropped afterwards.
    Its commits do not wait for the WAL flush (no test crashes the shared server)."""
    name = f"fairgate_e2e_{secrets.token_hex(4)}"
    asyncio.run(
        _on_server(
            pg_url,
            f"CREATE DATABASE {name} TEMPLATE {pg_template}",
            f"ALTER DATABASE {name} SET synchronous_commit = off",
        )
    )
    try:
        yield _database_url(pg_url, name)
    finally:
        _drop(pg_url, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The ``store`` section, once for each store: SQLite in the test's directory, or a
    PostgreSQL database of the test's own (dropped afterwards)."""
    if request.param == "sqlite":
        yield {"url": "sqlite:///fairgate.db"}
        return
    url: str = request.getfixturevalue("pg_database")
    (tmp_path / "pg.url").write_text(url)
    yield {"url_file": "pg.url"}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_section(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The ``store`` section, once per store: SQLite in the gateway's directory, or a
    PostgreSQL database of the test's own (``pg_database``)."""
    if request.param == "sqlite":
        return {"url": "sqlite:///fairgate.db"}
    url_file = tmp_path / "pg.url"
    url_file.write_text(request.getfixturevalue("pg_database"))
    return {"url_file": str(url_file)}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The certificates of a control plane and its nodes in `tmp_path`; the agents
    started on them are stopped (with their engines) at the end."""
    from tests.e2e.fleet_helpers import Fleet

    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.stop()
