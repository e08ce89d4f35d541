"""Withdrawn access cuts the requests already running, on every gateway process.

A stream the simulated engine would take well over a minute to finish is opened with
a key; the key is then revoked (through the admin API of another gateway sharing the
store and Redis, or of the same one), or its team disabled. Within a few seconds the
stream ends with the error event a new request's refusal carries, the engine's
running count drops to 0 (the gateway closed its connection: the sequence aborted),
and the request's usage record exists, outcome ``revoked``, charged its reservation
(estimated). A plain (non-streaming) request cut before its answer gets the 401 a
new request gets. A change that leaves the key valid cuts nothing. A stream opened with an access
token (JWT) is cut when its person is revoked, and one opened with an exchanged key
when a later exchange evicts that key (``max_keys: 1``).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from tests.e2e.conftest import admin_call, model, write_config
from tests.e2e.robust_wire import answer_ended, chat_body, connect, post, read_until, until
from tests.oidc_provider.fixture import OidcProvider

from fairgate.config import load_config
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from fairgate.store import tables
from fairgate.tenancy import open_tenancy

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-in-flight-revocation"
MAX_TOKENS = 2000  # 100 s at 20 tokens/s: only a cut ends it within the test
WITHIN = 3.0  # seconds from the withdrawal to the stream's end (the feed: within 1 s)
COST = {"input_per_mtok": 1.0, "output_per_mtok": 10.0}
REFUSAL = {
    "error": {
        "message": "invalid API key",
        "type": "authentication_error",
        "code": "invalid_api_key",
    }
}


def config(directory: Path, sim: SimProcess, **sections: Any) -> Path:
    (directory / "master.key").write_text(MASTER + "\n")
    return write_config(
        directory,
        [model("m", sim, cost=COST)],
        auth={"key_cache_ttl": "1h"},  # the cache TTL must not be what stops the key
        master_key_file="master.key",
        **sections,
    )


def admin(gateway: GatewayProcess, method: str, path: str, **body: Any) -> Any:
    return admin_call(gateway, MASTER, method, path, **body)


def record(config_path: Path, request_id: str) -> dict[str, Any] | None:
    """The usage record of ``request_id`` in the store, or None."""

    async def read() -> dict[str, Any] | None:
        t = tables.usage_records
        async with open_tenancy(load_config(config_path)) as tenancy, tenancy.store.read() as conn:
            query = sa.select(t).where(t.c.request_id == request_id)
            row = (await conn.execute(query)).one_or_none()
            return None if row is None else dict(row._mapping)

    return asyncio.run(read())


def request_id(head: bytes) -> str:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"x-request-id":
            return value.strip().decode()
    raise AssertionError(f"no x-request-id in {head[:300]!r}")


@dataclass
class Stream:
    """A long stream open on a gateway, some of its events read."""

    sock: socket.socket
    head: bytes

    @classmethod
    def open(cls, gateway: GatewayProcess, key: str, *, stream: bool = True) -> Stream:
        sock = connect(gateway.host, gateway.port)
        post(sock, "/v1/chat/completions", chat_body(stream=stream, max_tokens=MAX_TOKENS), key)
        head = b""
        if stream:
            head = read_until(sock, lambda got: got.count(b"data: {") >= 4, timeout=30)
            assert head.startswith(b"HTTP/1.1 200"), head[:300]
        return cls(sock, head)

    def rest(self) -> tuple[bytes, float]:
        """What follows until the gateway ends the answer, and when it ended."""
        got = read_until(self.sock, lambda got: answer_ended(self.head + got), timeout=60)
        ended = time.monotonic()
        self.sock.close()
        assert answer_ended(self.head + got), f"the answer was not ended: {got[-300:]!r}"
        return got, ended


def running(sim: SimProcess) -> int:
    return int(sim.stats()["running"])


def assert_cut_stream(sim: SimProcess, config_path: Path, stream: Stream, withdrawn: float) -> None:
    rest, ended = stream.rest()
    assert ended - withdrawn < WITHIN, f"the stream ran {ended - withdrawn:.1f}s on"
    last = (stream.head + rest).rsplit(b"data: ", 1)[1].split(b"\n\n", 1)[0]
    assert json.loads(last) == REFUSAL  # the refusal a new request with the key gets
    assert b"[DONE]" not in rest
    until(lambda: running(sim) == 0, 10, "the engine stopped generating")
    stats = sim.stats()
    assert stats["aborted"] >= 1 and stats["finished"] == 0
    rid = request_id(stream.head)
    row = until(lambda: record(config_path, rid), 15, "the cut request's usage record")
    assert row["outcome"] == "revoked"
    assert row["estimated"] and row["completion_tokens"] == MAX_TOKENS  # its reservation
    assert row["cost_micro"] >= MAX_TOKENS * 10


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--model", "m", "--speed", "20", "--ttft", "0.05") as sim:
        yield sim


@pytest.fixture(autouse=True)
def _idle(sim: SimProcess) -> None:
    until(lambda: running(sim) == 0, 30, "the engine is idle before the test")
    sim.reset()


@dataclass(frozen=True, slots=True)
class Single:
    config: Path
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory, sim: SimProcess) -> Iterator[Single]:
    path = config(tmp_path_factory.mktemp("single"), sim)
    with GatewayProcess(path) as gateway:
        yield Single(path, gateway)


@pytest.mark.postgres
def test_a_stream_on_one_gateway_is_cut_when_another_revokes_its_key(
    tmp_path: Path, sim: SimProcess, pg_database: str, redis_state: dict[str, Any]
) -> None:
    (tmp_path / "pg.url").write_text(pg_database)
    shared: dict[str, Any] = {"store": {"url_file": str(tmp_path / "pg.url")}, "state": redis_state}
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first_config, second_config = config(one, sim, **shared), config(two, sim, **shared)
    with GatewayProcess(first_config) as first, GatewayProcess(second_config) as second:
        key = admin(first, "POST", "/admin/keys", team="t")
        stream = Stream.open(second, key["secret"])
        assert running(sim) == 1
        admin(first, "DELETE", f"/admin/keys/{key['id']}")
        assert_cut_stream(sim, second_config, stream, time.monotonic())


def test_a_plain_request_is_cut_with_the_refusal_a_new_request_gets(
    single: Single, sim: SimProcess
) -> None:
    gateway = single.gateway
    key = admin(gateway, "POST", "/admin/keys", team="t")
    plain = Stream.open(gateway, key["secret"], stream=False)
    until(lambda: running(sim) == 1, 20, "the engine is generating the answer")
    admin(gateway, "DELETE", f"/admin/keys/{key['id']}")
    withdrawn = time.monotonic()
    answer, ended = plain.rest()
    assert ended - withdrawn < WITHIN
    assert answer.startswith(b"HTTP/1.1 401"), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == REFUSAL
    until(lambda: running(sim) == 0, 10, "the engine stopped generating")
    rid = request_id(answer)
    row = until(lambda: record(single.config, rid), 15, "the cut request's usage record")
    assert (row["outcome"], row["status"], row["estimated"]) == ("revoked", 401, True)
    assert row["completion_tokens"] == MAX_TOKENS and row["cost_micro"] > 0


def test_a_stream_is_cut_when_its_team_is_disabled(single: Single, sim: SimProcess) -> None:
    gateway = single.gateway
    admin(gateway, "POST", "/admin/teams", org="test-org", name="closing")
    key = admin(gateway, "POST", "/admin/keys", team="closing")
    stream = Stream.open(gateway, key["secret"])
    admin(gateway, "DELETE", "/admin/teams/closing")
    assert_cut_stream(sim, single.config, stream, time.monotonic())


def test_a_change_that_leaves_the_key_valid_cuts_nothing(single: Single, sim: SimProcess) -> None:
    gateway = single.gateway
    admin(gateway, "POST", "/admin/teams", org="test-org", name="staying")
    key = admin(gateway, "POST", "/admin/keys", team="staying")
    stream = Stream.open(gateway, key["secret"])
    admin(gateway, "PATCH", "/admin/teams/staying", models=["m"])  # a team change: re-checked
    time.sleep(3)
    more = read_until(stream.sock, lambda got: got.count(b"data: {") >= 20, timeout=10)
    assert more.count(b"data: {") >= 20 and b'"error"' not in more
    assert running(sim) == 1
    stream.sock.close()


def test_a_stream_with_an_access_token_is_cut_when_its_person_is_revoked(
    tmp_path: Path, sim: SimProcess
) -> None:
    with OidcProvider() as provider:
        jwt = {
            "issuer": provider.issuer,
            "audience": "fairgate",
            "type": "at+jwt",
            "map": [{"value": "lab-t", "team": "t"}],
        }
        path = config(tmp_path, sim, jwt=jwt)
        with GatewayProcess(path, startup_timeout=120) as gateway:
            token = provider.mint(sub="erin", groups=["lab-t"])
            stream = Stream.open(gateway, token)
            revoke = {"issuer": provider.issuer, "subject": "erin"}
            admin(gateway, "POST", "/admin/identities/revoke", **revoke)
            assert_cut_stream(sim, path, stream, time.monotonic())


def test_a_stream_with_an_exchanged_key_is_cut_when_a_later_exchange_evicts_it(
    tmp_path: Path, sim: SimProcess
) -> None:
    with OidcProvider() as provider, OidcProvider("--audience", "fairgate-ci") as ci:
        jwt = {
            "issuer": provider.issuer,
            "audience": "fairgate",
            "type": "at+jwt",
            "map": [{"value": "lab-t", "team": "t"}],
            "exchange": [
                {
                    "issuer": ci.issuer,
                    "audience": "fairgate-ci",
                    "key_ttl": "10m",
                    "max_keys": 1,
                    "map": [{"claim": "project_path", "value": "lab/infer", "team": "t"}],
                }
            ],
        }
        path = config(tmp_path, sim, jwt=jwt)
        with GatewayProcess(path, startup_timeout=120) as gateway:
            workload = ci.mint(sub="ci-job", aud="fairgate-ci", project_path="lab/infer")

            def exchange() -> str:
                answer = httpx.post(
                    gateway.url + "/v1/auth/exchange",
                    headers={"authorization": f"Bearer {workload}"},
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text
                secret: str = answer.json()["api_key"]
                return secret

            stream = Stream.open(gateway, exchange())
            newer = exchange()  # the first key is evicted (max_keys: 1)
            assert_cut_stream(sim, path, stream, time.monotonic())
            kept = Stream.open(gateway, newer)  # the newer key still serves
            kept.sock.close()
