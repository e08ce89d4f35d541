"""IP allowlists against real gateway processes: clients bound to distinct loopback addresses.

The gateway listens on 127.0.0.1; a client bound to 127.0.0.2 is "inside", one bound
to 127.0.0.3 "outside". Every request the gateway answers is covered, those it
answers itself (``/v1/models``, ``/me``) too; a refusal is the same 403 whichever
list refused; a list set through the admin API of one gateway binds the other
gateway sharing its PostgreSQL store and Redis within a second, and clearing it
gives access back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.e2e.test_admin import metric
from tests.e2e.test_revocation import WITHIN, Loop, admin, config, new_key, settle

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

INSIDE = "127.0.0.2"
OUTSIDE = "127.0.0.3"
CHAT = {"model": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def client(gateway: GatewayProcess, secret: str, source: str) -> httpx.Client:
    """A client whose connections come from ``source``."""
    return httpx.Client(
        base_url=gateway.url,
        headers={"authorization": f"Bearer {secret}"},
        transport=httpx.HTTPTransport(local_address=source),
        timeout=30,
    )


def answers(gateway: GatewayProcess, secret: str, source: str) -> list[httpx.Response]:
    """A chat completion, ``GET /v1/models`` and ``GET /me`` from ``source``."""
    with client(gateway, secret, source) as c:
        return [c.post("/v1/chat/completions", json=CHAT), c.get("/v1/models"), c.get("/me")]


def put(gateway: GatewayProcess, kind: str, name: str, *cidrs: str) -> None:
    admin(gateway, "PUT", "/admin/allowlists", kind=kind, name=name, cidrs=list(cidrs))


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--model", "a", "--speed", "0", "--ttft", "0") as sim:
        yield sim


@dataclass(frozen=True, slots=True)
class Single:
    config: Path
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, sim: SimProcess) -> Iterator[Single]:
    gateway_config = config(tmp_path_factory.mktemp("allowlists"), sim)
    with GatewayProcess(gateway_config) as gateway:
        yield Single(gateway_config, gateway)


def test_a_key_with_a_list_is_served_inside_and_refused_outside_on_every_route(
    single: Single,
) -> None:
    gateway = single.gateway
    key_id, secret = new_key(single.config)
    put(gateway, "key", key_id, f"{INSIDE}/32")
    refusals = "fairgate_auth_refusals_total"
    before = metric(gateway, refusals, listener="client", reason="address_not_allowed")
    assert [r.status_code for r in answers(gateway, secret, INSIDE)] == [200, 200, 200]
    refused = answers(gateway, secret, OUTSIDE)
    assert [r.status_code for r in refused] == [403, 403, 403]
    for answer in refused:
        assert answer.json() == {
            "error": {
                "message": "requests with this key are not allowed from this address",
                "type": "permission_error",
                "code": "address_not_allowed",
            }
        }
    after = metric(gateway, refusals, listener="client", reason="address_not_allowed")
    assert after == before + 3


def test_every_list_that_applies_must_hold_the_address(single: Single) -> None:
    gateway = single.gateway
    admin(gateway, "POST", "/admin/orgs", name="campus")
    admin(gateway, "POST", "/admin/teams", org="campus", name="lab")
    key = admin(gateway, "POST", "/admin/keys", team="lab")
    put(gateway, "org", "campus", "127.0.0.0/29")  # holds .2 and .3
    put(gateway, "team", "lab", "127.0.0.2", "127.0.0.3")
    put(gateway, "key", key["id"], "127.0.0.2")  # the key's own list: .2 only
    with client(gateway, key["secret"], INSIDE) as inside:
        assert inside.post("/v1/chat/completions", json=CHAT).status_code == 200
    with client(gateway, key["secret"], OUTSIDE) as outside:  # org and team hold it, not the key
        by_key = outside.post("/v1/chat/completions", json=CHAT)
    put(gateway, "key", key["id"], "127.0.0.2", "127.0.0.3")
    put(gateway, "team", "lab", "127.0.0.2")  # now only the team's list leaves .3 out
    time.sleep(WITHIN)
    with client(gateway, key["secret"], OUTSIDE) as outside:
        by_team = outside.post("/v1/chat/completions", json=CHAT)
    assert by_key.status_code == by_team.status_code == 403
    assert by_key.content == by_team.content  # which list refused is in the log only


@pytest.mark.postgres
def test_a_list_set_through_one_gateway_binds_the_other_within_a_second_and_clearing_frees(
    tmp_path: Path, sim: SimProcess, pg_database: str, redis_state: dict[str, Any]
) -> None:
    (tmp_path / "pg.url").write_text(pg_database)
    shared: dict[str, Any] = {"store": {"url_file": str(tmp_path / "pg.url")}, "state": redis_state}
    directories = [tmp_path / "one", tmp_path / "two"]
    for directory in directories:
        directory.mkdir()
    one, two = (config(d, sim, **shared) for d in directories)
    _, secret = new_key(one)
    with GatewayProcess(one) as first, GatewayProcess(two) as second:
        # served and cached by the second gateway
        with Loop(second, secret, source=OUTSIDE) as loop:
            put(first, "team", "t", f"{INSIDE}/32", "2001:db8::/32")
            settle(loop, time.monotonic())
        assert {s.status for s in loop.refused_after(0)} == {403}
        with client(second, secret, INSIDE) as inside:
            assert inside.post("/v1/chat/completions", json=CHAT).status_code == 200
        put(first, "team", "t")
        cleared = time.monotonic()
        with client(second, secret, OUTSIDE) as outside:
            while (started := time.monotonic()) < cleared + WITHIN + 2:
                if outside.post("/v1/chat/completions", json=CHAT).status_code == 200:
                    break
        assert started <= cleared + WITHIN, "clearing the list did not give access back in time"
        assert [r.status_code for r in answers(second, secret, OUTSIDE)] == [200, 200, 200]
