"""Withdrawn access takes effect on every gateway process within a second, whoever withdrew it.

A client loops requests with a key the gateway has cached (the key cache TTL is an
hour, so the TTL cannot be what stops it); access is withdrawn by another process
(the operator CLI), by the admin API of the same gateway, or by the admin API of
another gateway sharing the store (PostgreSQL) and Redis. Every request is timed:
none that *started* more than a second after the withdrawal returned may be served.

- ``fairgate keys revoke`` (a separate process) on SQLite;
- ``fairgate keys rotate --grace 0s``: the old secret stops, the new one works;
- a team disabled, and a team allowlist narrowed, through the admin API;
- two gateways on PostgreSQL and Redis: revoked through gateway 1, refused by gateway 2.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import admin_call, model, write_config
from tests.e2e.test_admin import metric
from tests.e2e.test_tenancy_flow import cli

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from fairgate.tenancy.actor import Actor

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-revocation-tests"
WITHIN = 1.0  # seconds: the promise
LONG_TTL = {"key_cache_ttl": "1h"}  # the backstop must not be what stops a key here


@dataclass(frozen=True, slots=True)
class Sent:
    started: float  # time.monotonic()
    status: int


class Loop:
    """A client sending one request after another with ``key`` until stopped; from the
    address ``source`` when given (127.0.0.2 …)."""

    def __init__(
        self, gateway: GatewayProcess, key: str, model_name: str = "a", *, source: str | None = None
    ) -> None:
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(gateway, key, model_name, source))

    def __enter__(self) -> Loop:
        self._thread.start()
        deadline = time.monotonic() + 30
        while sum(s.status == 200 for s in self.sent) < 20:  # the key is served (and cached)
            assert time.monotonic() < deadline, f"the key was not served: {self.statuses()}"
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def statuses(self) -> set[int]:
        return {s.status for s in self.sent}

    def served_after(self, moment: float) -> list[Sent]:
        """Requests started after ``moment`` and still served."""
        return [s for s in self.sent if s.started > moment and s.status == 200]

    def refused_after(self, moment: float) -> list[Sent]:
        return [s for s in self.sent if s.started > moment and s.status != 200]

    def _run(self, gateway: GatewayProcess, key: str, model_name: str, source: str | None) -> None:
        body: dict[str, Any] = {
            "model": model_name,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 1,
        }
        headers = {"authorization": f"Bearer {key}"}
        transport = None if source is None else httpx.HTTPTransport(local_address=source)
        with httpx.Client(
            base_url=gateway.url, headers=headers, timeout=30, transport=transport
        ) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                status = client.post("/v1/chat/completions", json=body).status_code
                self.sent.append(Sent(started, status))


def settle(loop: Loop, withdrawn: float) -> None:
    """Let the loop run until two seconds past the withdrawal, then check the promise."""
    while time.monotonic() < withdrawn + WITHIN + 2.0:
        time.sleep(0.1)
    late = loop.served_after(withdrawn + WITHIN)
    assert late == [], f"{len(late)} requests served more than {WITHIN}s after the withdrawal"
    refused = loop.refused_after(withdrawn + WITHIN)
    assert refused, "the loop sent nothing after the withdrawal"


def new_key(config: Path) -> tuple[str, str]:
    """(id, secret) of a new key in team t, made in this process: what is tested is how
    it is withdrawn (an operator CLI process starts in seconds on a busy machine)."""

    async def create() -> tuple[str, str]:
        async with open_tenancy(load_config(config)) as tenancy:
            created = await tenancy.keys.create(Actor.operator("tests"), team="t")
            return created.key.id, created.secret

    return asyncio.run(create())


def admin(gateway: GatewayProcess, method: str, path: str, **body: Any) -> Any:
    return admin_call(gateway, MASTER, method, path, **body)


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--model", "a", "--speed", "0", "--ttft", "0") as sim:
        yield sim


def config(directory: Path, sim: SimProcess, **sections: Any) -> Path:
    (directory / "master.key").write_text(MASTER + "\n")
    return write_config(
        directory, [model("a", sim)], auth=LONG_TTL, master_key_file="master.key", **sections
    )


@dataclass(frozen=True, slots=True)
class Shared:
    """One gateway on SQLite for the tests that withdraw access on a single process: each
    makes keys and teams of its own, so none sees another's withdrawal."""

    config: Path
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, sim: SimProcess) -> Iterator[Shared]:
    gateway_config = config(tmp_path_factory.mktemp("single"), sim)
    with GatewayProcess(gateway_config) as gateway:
        yield Shared(gateway_config, gateway)


def test_a_key_revoked_through_the_cli_is_refused_within_a_second(single: Shared) -> None:
    gateway_config, gateway = single.config, single.gateway
    key_id, secret = new_key(gateway_config)
    changes = "fairgate_auth_access_changes_total"
    applied = metric(gateway, changes, outcome="applied")
    with Loop(gateway, secret) as loop:
        cli(gateway_config, "keys", "revoke", key_id)
        revoked = time.monotonic()
        settle(loop, revoked)
        assert metric(gateway, changes, outcome="applied") >= applied + 1
    assert loop.statuses() <= {200, 401, 429}


def test_rotating_with_no_grace_stops_the_old_secret_within_a_second(single: Shared) -> None:
    gateway_config, gateway = single.config, single.gateway
    key_id, old = new_key(gateway_config)
    with Loop(gateway, old) as loop:
        (rotated,) = json.loads(
            cli(gateway_config, "keys", "rotate", key_id, "--grace", "0s", "--json")
        )
        done = time.monotonic()
        settle(loop, done)
    with Loop(gateway, rotated["secret"]) as fresh:
        pass
    assert fresh.statuses() == {200}


def test_a_team_disabled_through_the_admin_api_loses_its_keys_within_a_second(
    single: Shared,
) -> None:
    gateway = single.gateway
    admin(gateway, "POST", "/admin/teams", org="test-org", name="borrowers")
    key = admin(gateway, "POST", "/admin/keys", team="borrowers")
    with Loop(gateway, key["secret"]) as loop:
        admin(gateway, "DELETE", "/admin/teams/borrowers")
        settle(loop, time.monotonic())


def test_a_narrowed_team_allowlist_applies_within_a_second(single: Shared) -> None:
    gateway = single.gateway
    admin(gateway, "POST", "/admin/teams", org="test-org", name="narrowed")
    key = admin(gateway, "POST", "/admin/keys", team="narrowed")
    with Loop(gateway, key["secret"]) as loop:
        admin(gateway, "PATCH", "/admin/teams/narrowed", models=[])
        settle(loop, time.monotonic())
    assert {s.status for s in loop.refused_after(0)} == {404}  # as for an unknown model


@pytest.mark.postgres
def test_revoked_through_one_gateway_the_other_refuses_within_a_second(
    tmp_path: Path,
    sim: SimProcess,
    pg_database: str,
    redis_state: dict[str, Any],
) -> None:
    (tmp_path / "pg.url").write_text(pg_database)
    shared: dict[str, Any] = {
        "store": {"url_file": str(tmp_path / "pg.url")},
        "state": redis_state,
    }
    directories = [tmp_path / "one", tmp_path / "two"]
    for directory in directories:
        directory.mkdir()
    one, two = (config(d, sim, **shared) for d in directories)
    key_id, secret = new_key(one)
    with (
        GatewayProcess(one) as first,
        GatewayProcess(two) as second,
        Loop(second, secret) as loop,
    ):
        admin(first, "DELETE", f"/admin/keys/{key_id}")
        settle(loop, time.monotonic())
