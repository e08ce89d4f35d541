"""Fixtures every test directory may use.

PostgreSQL and Redis are real services. Locally a test that needs one is
skipped with the reason when the service is not reachable; under CI=true it
fails instead, so a missing service can never turn into a green run.

Hypothesis runs under one of two profiles. ``suite`` (the default) keeps every
property bounded, since the whole suite shares two busy cores; ``fuzz``
(``HYPOTHESIS_PROFILE=fuzz``, what ``make fuzz`` sets) runs the properties
marked ``fuzz`` with ``FUZZ_EXAMPLES`` examples each (20000 unless set).
Neither has a deadline: a busy machine must not turn a slow example into a
failure.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

PG_URL = os.environ.get("FAIRGATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("FAIRGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")

settings.register_profile("suite", max_examples=100, deadline=None)
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "20000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _require(service: str, host: str, port: int) -> None:
    if _reachable(host, port):
        return
    reason = f"{service} is not reachable at {host}:{port}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: services are required, not optional)")
    pytest.skip(f"{reason}; start it to run this test")


@pytest.fixture(scope="session")
def pg_url() -> str:
    _require("PostgreSQL", "127.0.0.1", 5432)
    return PG_URL


@pytest.fixture(scope="session")
def redis_url() -> str:
    _require("Redis", "127.0.0.1", 6379)
    return REDIS_URL


@pytest.fixture(scope="session")
def pg_template(pg_url: str) -> Iterator[str]:
    """A database migrated once per session (per worker), that each ``pg_database``
    (tests/e2e/conftest.py) is copied from: a migration costs seconds, a copy a fraction."""
    import asyncio

    from tests.e2e.conftest import _database_url, _drop, _on_server

    from fairgate.store import upgrade

    name = f"fairgate_e2e_template_{secrets.token_hex(4)}"
    asyncio.run(_on_server(pg_url, f"CREATE DATABASE {name}"))
    try:
        asyncio.run(upgrade(_database_url(pg_url, name)))
        yield name
    finally:
        _drop(pg_url, name)
