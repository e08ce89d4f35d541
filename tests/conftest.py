"""Fixtures every test directory may use.

PostgreSQL and Redis are real services. Locally a test that needs one is
skipped with the reason when the service is not reachable; under CI=true it
fails instead, so a missing service can never turn into a green run.
"""

from __future__ import annotations

import os
import socket

import pytest

PG_URL = os.environ.get("FAIRGATE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("FAIRGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


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
