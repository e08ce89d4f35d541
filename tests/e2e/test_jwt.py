"""OIDC access tokens on the inference API, end to end: a real provider process, a real gateway.

- a valid access token calls /v1/chat/completions through the openai SDK; its usage record
  is the person's synthetic key (jwt-…) in the mapped team;
- every refusal (alg none, HS256 keyed with the public key, expired, not yet valid, wrong
  audience, wrong issuer, unmapped, an ID token where at+jwt is required, a revoked person,
  two credentials) is the bad key's 401, byte for byte, its reason counted in
  fairgate_jwt_refusals_total;
- a revoked person with a cached token is refused within a second (CLI and admin API), and
  served again once restored;
- 1,000 tokens with unknown kids cause at most one JWKS fetch;
- /v1/auth/exchange swaps a workload token for a short-lived key that works with the openai
  SDK, and two exchanges land on one key id (one spend line);
- one workload token exchanged 110 times, 100 of them at once, leaves its identity the
  default 100 live keys: the oldest, cached, is refused within a second;
- an identity past its exchanges per minute is refused 429 with a Retry-After, and the
  refused exchanges store nothing (no live key of it is revoked); another identity is
  still served;
- an issuer that does not answer at start-up stops `fairgate serve` with one line.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests.e2e.conftest import TEST_KEY, model, write_config
from tests.e2e.robust_wire import samples
from tests.oidc_provider.fixture import OidcProvider
from tests.redis_server import free_port

from fairgate.auth.jwt import person_key_id
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

MASTER = "a-master-key-for-the-jwt-tests-only"
WITHIN = 1.0  # seconds: how soon a revocation holds on the replica that made it
BAD_KEY = "fg-" + "x" * 43
EXCHANGES_PER_MINUTE = 120  # above the 111 exchanges of the max_keys test
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


@dataclass
class Setup:
    gateway: GatewayProcess
    config: Path
    provider: OidcProvider
    ci: OidcProvider

    @property
    def db(self) -> Path:
        return self.config.parent / "fairgate.db"


def _jwt_section(provider: OidcProvider, ci: OidcProvider) -> dict[str, Any]:
    return {
        "issuer": provider.issuer,
        "audience": "fairgate",
        "type": "at+jwt",
        "min_refresh": "60s",
        "map": [
            {"value": "lab-t", "team": "t"},
            {"claim": "department", "value": "chem", "team": "u", "project": "eval"},
        ],
        "rpm": 1000,
        "exchange": [
            {
                "issuer": ci.issuer,
                "audience": "fairgate-ci",
                "key_ttl": "10m",
                "exchanges_per_minute": EXCHANGES_PER_MINUTE,
                "map": [{"claim": "project_path", "value": "lab/infer", "team": "t"}],
            }
        ],
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("jwt")
    (directory / "master.key").write_text(MASTER)
    with (
        SimProcess("--model", "m", "--speed", "0") as sim,
        OidcProvider() as provider,
        OidcProvider("--audience", "fairgate-ci") as ci,
    ):
        config = write_config(
            directory,
            [model("m", sim)],
            master_key_file="master.key",
            orgs=[{"name": "test-org", "share": 1.0, "teams": ["t", "u"]}],
            auth={
                "failures_per_minute": 0,
                "failures_per_minute_ipv4_24": 0,
                "failures_per_minute_ipv6_48": 0,
                "failures_per_minute_ipv6_32": 0,
            },
            jwt=_jwt_section(provider, ci),
        )
        _add_project(config, "u", "eval")
        with GatewayProcess(config, startup_timeout=120) as gateway:
            yield Setup(gateway, config, provider, ci)


def _add_project(config: Path, team: str, name: str) -> None:
    from fairgate.config import load_config
    from fairgate.tenancy import open_tenancy
    from fairgate.tenancy.actor import Actor

    async def create() -> None:
        async with open_tenancy(load_config(config)) as tenancy:
            await tenancy.projects.create(Actor.operator("tests"), team=team, name=name)

    asyncio.run(create())


def chat(setup: Setup, bearer: str, **headers: str) -> httpx.Response:
    return httpx.post(
        setup.gateway.url + "/v1/chat/completions",
        json=CHAT,
        headers={"authorization": f"Bearer {bearer}", **headers},
        timeout=30,
    )


def bad_key_answer(setup: Setup) -> bytes:
    answer = chat(setup, BAD_KEY)
    assert answer.status_code == 401
    return answer.content


def refusals(setup: Setup) -> dict[str, float]:
    text = httpx.get(setup.gateway.admin_url + "/metrics", timeout=30).text
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("fairgate_jwt_refusals_total{"):
            labels, _, value = line.rpartition(" ")
            reason = labels.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = float(value)
    return counts


def metric(setup: Setup, name: str, **labels: str) -> float:
    text = httpx.get(setup.gateway.admin_url + "/metrics", timeout=30).text
    return samples(text, name, **labels)


def admin(setup: Setup, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(
        method,
        setup.gateway.admin_url + path,
        headers={"authorization": f"Bearer {MASTER}"},
        timeout=30,
        **kw,
    )


def usage(setup: Setup, key_id: str, count: int = 1) -> list[tuple[str, str, str | None]]:
    """The usage records of ``key_id`` (key id, team, project) once ``count`` are stored."""
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(setup.db) as db:
            rows = db.execute(
                "SELECT key_id, team, project FROM usage_records WHERE key_id = ?", (key_id,)
            ).fetchall()
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_a_valid_access_token_calls_through_the_openai_sdk_accounted_to_the_mapped_team(
    setup: Setup,
) -> None:
    token = setup.provider.mint(sub="alice", groups=["other", "lab-t"])
    client = openai.OpenAI(base_url=setup.gateway.url + "/v1", api_key=token, max_retries=0)
    answer = client.chat.completions.create(**CHAT)
    assert answer.choices[0].message.content
    client.chat.completions.create(**CHAT)  # the cached token
    key_id = person_key_id(setup.provider.issuer, "alice")
    assert usage(setup, key_id, 2) == [(key_id, "t", None)] * 2
    # a claim other than groups, with a project: the second rule
    bob = setup.provider.mint(sub="bob", department="chem")
    assert chat(setup, bob).status_code == 200
    bob_id = person_key_id(setup.provider.issuer, "bob")
    assert usage(setup, bob_id) == [(bob_id, "u", "eval")]
    # the person is listed, with the team the map gave
    listed = admin(setup, "GET", "/admin/identities").json()["data"]
    assert {(p["subject"], p["team"]) for p in listed} >= {("alice", "t"), ("bob", "u")}


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _attacks(setup: Setup) -> dict[str, tuple[str, str]]:
    """name → (token, the reason the server should count)."""
    p = setup.provider
    now = int(time.time())
    return {
        "alg none": (p.mint(attack="none", groups=["lab-t"]), "alg_refused"),
        "HS256 keyed with the public key": (
            p.mint(attack="hs256-public-key", groups=["lab-t"]),
            "alg_refused",
        ),
        "expired": (p.mint(groups=["lab-t"], exp=now - 3600, iat=now - 7200), "expired"),
        "no exp": (p.mint(groups=["lab-t"], omit=("exp",)), "no_expiry"),
        "not yet valid": (p.mint(groups=["lab-t"], nbf=now + 3600), "not_yet_valid"),
        "wrong audience": (p.mint(groups=["lab-t"], aud="someone-else"), "wrong_audience"),
        "wrong issuer": (p.mint(groups=["lab-t"], iss=p.issuer + "/other"), "wrong_issuer"),
        "unmapped group": (p.mint(groups=["lab-nobody"]), "unmapped"),
        "an ID token": (p.mint(groups=["lab-t"], header={"typ": "JWT"}), "id_token"),
        "another issuer's key": (
            setup.ci.mint(iss=p.issuer, aud="fairgate", groups=["lab-t"]),
            "unknown_kid",
        ),
        "a tampered payload": (_tampered(p.mint(groups=["lab-x"])), "bad_signature"),
    }


def _tampered(token: str) -> str:
    header, _payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(_payload + "=" * (-len(_payload) % 4)))
    claims["groups"] = ["lab-t"]
    return f"{header}.{_b64(claims)}.{signature}"


def test_every_refused_token_gets_the_bad_key_401_byte_for_byte_and_its_reason_is_counted(
    setup: Setup,
) -> None:
    expected = bad_key_answer(setup)
    before = refusals(setup)
    attacks = _attacks(setup)
    for name, (token, _reason) in attacks.items():
        answer = chat(setup, token)
        assert answer.status_code == 401, name
        assert answer.content == expected, name
        assert token[:20] not in answer.text
    after = refusals(setup)
    wanted: dict[str, int] = {}
    for _token, reason in attacks.values():
        wanted[reason] = wanted.get(reason, 0) + 1
    for reason, count in wanted.items():
        assert after.get(reason, 0) - before.get(reason, 0) >= count, (reason, after)


def test_two_credentials_are_refused_never_one_preferred(setup: Setup) -> None:
    expected = bad_key_answer(setup)
    token = setup.provider.mint(sub="carol", groups=["lab-t"])
    assert chat(setup, token).status_code == 200
    assert chat(setup, TEST_KEY).status_code == 200
    both = [
        chat(setup, token, **{"x-api-key": TEST_KEY}),
        chat(setup, TEST_KEY, **{"api-key": token}),
        httpx.post(
            setup.gateway.url + "/v1/chat/completions",
            json=CHAT,
            headers=[("authorization", f"Bearer {token}"), ("authorization", f"Bearer {TEST_KEY}")],
            timeout=30,
        ),
    ]
    for answer in both:
        assert answer.status_code == 401
        assert answer.content == expected


def _refused_soon(setup: Setup, token: str) -> float:
    """Seconds until ``token`` is refused (fails past WITHIN)."""
    started = time.monotonic()
    while chat(setup, token).status_code == 200:
        assert time.monotonic() - started < WITHIN + 1.0, "the revoked person is still served"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_person_revoked_through_the_cli_is_refused_with_a_cached_token_and_restored(
    setup: Setup,
) -> None:
    expected = bad_key_answer(setup)
    issuer = setup.provider.issuer
    token = setup.provider.mint(sub="dave", groups=["lab-t"])
    assert chat(setup, token).status_code == 200  # verified and cached
    fresh = setup.provider.mint(sub="dave", groups=["lab-t"])
    people = [sys.executable, "-m", "fairgate", "people"]
    revoked = subprocess.run(
        [*people, "revoke", "-c", str(setup.config), "--issuer", issuer, "--subject", "dave"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert revoked.returncode == 0, revoked.stderr
    _refused_soon(setup, token)
    assert chat(setup, token).content == expected
    assert chat(setup, fresh).content == expected  # whatever token they hold
    listed = subprocess.run(
        [*people, "list", "-c", str(setup.config), "--revoked", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "dave" in listed.stdout
    restored = subprocess.run(
        [*people, "restore", "-c", str(setup.config), "--issuer", issuer, "--subject", "dave"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert restored.returncode == 0, restored.stderr
    deadline = time.monotonic() + WITHIN + 1.0
    while chat(setup, fresh).status_code != 200:
        assert time.monotonic() < deadline, "the restored person is still refused"
        time.sleep(0.05)


def test_a_person_revoked_through_the_admin_api_is_refused_at_once_even_ahead_of_first_sight(
    setup: Setup,
) -> None:
    expected = bad_key_answer(setup)
    issuer = setup.provider.issuer
    token = setup.provider.mint(sub="erin", groups=["lab-t"])
    assert chat(setup, token).status_code == 200
    answer = admin(
        setup, "POST", "/admin/identities/revoke", json={"issuer": issuer, "subject": "erin"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["key_id"] == person_key_id(issuer, "erin")
    assert _refused_soon(setup, token) < WITHIN
    assert chat(setup, token).content == expected
    # somebody never seen, revoked ahead: refused at their first token
    ahead = admin(
        setup, "POST", "/admin/identities/revoke", json={"issuer": issuer, "subject": "fay"}
    )
    assert ahead.status_code == 200, ahead.text
    assert chat(setup, setup.provider.mint(sub="fay", groups=["lab-t"])).content == expected
    # a key, not an admin, may not revoke
    refused = httpx.post(
        setup.gateway.admin_url + "/admin/identities/revoke",
        json={"issuer": issuer, "subject": "alice"},
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )
    assert refused.status_code == 401


def test_a_flood_of_unknown_kids_fetches_the_key_set_at_most_once(setup: Setup) -> None:
    real = setup.provider.mint(sub="grace", groups=["lab-t"])
    _header, payload, signature = real.split(".")
    setup.provider.reset()
    expected = bad_key_answer(setup)

    async def flood() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            gate = asyncio.Semaphore(32)

            async def one(i: int) -> httpx.Response:
                header = _b64(
                    {"alg": "RS256", "typ": "at+jwt", "kid": f"unknown-{i}-{os.urandom(4).hex()}"}
                )
                async with gate:
                    return await client.post(
                        setup.gateway.url + "/v1/chat/completions",
                        json=CHAT,
                        headers={"authorization": f"Bearer {header}.{payload}.{signature}"},
                    )

            return await asyncio.gather(*(one(i) for i in range(1000)))

    answers = asyncio.run(flood())
    assert {a.status_code for a in answers} == {401}
    assert {a.content for a in answers} == {expected}
    assert setup.provider.stats()["jwks"] <= 1
    assert chat(setup, real).status_code == 200  # the real key still served


def test_a_workload_token_is_exchanged_for_a_key_and_two_exchanges_are_one_spend_line(
    setup: Setup,
) -> None:
    expected = bad_key_answer(setup)
    sub = "project_path:lab/infer:ref_type:branch:ref:main"
    exchanged = []
    for _ in range(2):
        workload = setup.ci.mint(sub=sub, aud="fairgate-ci", project_path="lab/infer")
        answer = httpx.post(
            setup.gateway.url + "/v1/auth/exchange",
            headers={"authorization": f"Bearer {workload}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert 590 <= body["expires_in"] <= 600 and body["team"] == "t"
        exchanged.append(body)
    assert exchanged[0]["api_key"] != exchanged[1]["api_key"]
    assert exchanged[0]["key_id"] == exchanged[1]["key_id"] == person_key_id(setup.ci.issuer, sub)
    for body in exchanged:
        client = openai.OpenAI(
            base_url=setup.gateway.url + "/v1", api_key=body["api_key"], max_retries=0
        )
        assert client.chat.completions.create(**CHAT).choices
    rows = usage(setup, exchanged[0]["key_id"], 2)
    assert len(rows) == 2 and {r[0] for r in rows} == {exchanged[0]["key_id"]}
    # refused: a caller's token (not an exchange issuer's), a wrong audience, no token
    for bearer in (
        setup.provider.mint(sub="alice", groups=["lab-t"]),
        setup.ci.mint(sub=sub, aud="fairgate", project_path="lab/infer"),
        setup.ci.mint(sub=sub, aud="fairgate-ci", project_path="lab/other"),
    ):
        answer = httpx.post(
            setup.gateway.url + "/v1/auth/exchange",
            headers={"authorization": f"Bearer {bearer}"},
            timeout=30,
        )
        assert answer.status_code == 401 and answer.content == expected
    # the exchange issuer's token is no caller's token on the inference API
    workload = setup.ci.mint(sub=sub, aud="fairgate-ci", project_path="lab/infer")
    assert chat(setup, workload).content == expected
    # revoking the workload identity refuses its exchanged keys too
    answer = admin(
        setup, "POST", "/admin/identities/revoke", json={"issuer": setup.ci.issuer, "subject": sub}
    )
    assert answer.status_code == 200
    _refused_soon(setup, exchanged[1]["api_key"])


def _exchange(setup: Setup, workload: str) -> dict[str, Any]:
    answer = httpx.post(
        setup.gateway.url + "/v1/auth/exchange",
        headers={"authorization": f"Bearer {workload}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_one_token_exchanged_over_and_over_keeps_max_keys_live_and_the_oldest_is_refused(
    setup: Setup,
) -> None:
    sub = "project_path:lab/infer:ref_type:branch:ref:flood"
    workload = setup.ci.mint(sub=sub, aud="fairgate-ci", project_path="lab/infer")
    revoked = metric(setup, "fairgate_jwt_exchange_revocations_total")
    oldest = _exchange(setup, workload)["api_key"]
    assert chat(setup, oldest).status_code == 200  # verified and cached
    # the same token again and again, as a restarting workload (or a thief) would
    given = [_exchange(setup, workload)["api_key"] for _ in range(10)]
    with ThreadPoolExecutor(8) as pool:
        given += pool.map(lambda _: _exchange(setup, workload)["api_key"], range(100))
    key_id = person_key_id(setup.ci.issuer, sub)
    with sqlite3.connect(setup.db) as db:
        (live,) = db.execute(
            "SELECT count(*) FROM person_keys WHERE key_id = ?", (key_id,)
        ).fetchone()
    assert live == 100  # the default jwt.exchange[].max_keys
    # counted for the operator: the cap is being hit (a loop, or max_keys set too low)
    assert metric(setup, "fairgate_jwt_exchange_revocations_total") - revoked == 11
    _refused_soon(setup, oldest)
    for secret in given[:10]:  # exchanged before the hundred: all older than them
        assert chat(setup, secret).status_code == 401
    assert chat(setup, given[-1]).status_code == 200


def test_an_identity_past_its_exchanges_per_minute_is_refused_and_stores_nothing(
    setup: Setup,
) -> None:
    sub = "project_path:lab/infer:ref_type:branch:ref:loop"
    workload = setup.ci.mint(sub=sub, aud="fairgate-ci", project_path="lab/infer")
    limited = metric(setup, "fairgate_jwt_exchanges_total", outcome="rate_limited")
    given = [_exchange(setup, workload)["api_key"] for _ in range(EXCHANGES_PER_MINUTE)]
    # within the same minute, one more is refused, saying when to try again
    for _ in range(3):
        answer = httpx.post(
            setup.gateway.url + "/v1/auth/exchange",
            headers={"authorization": f"Bearer {workload}"},
            timeout=30,
        )
        assert answer.status_code == 429, answer.text
        error = answer.json()["error"]
        assert error["code"] == "exchange_rate_exceeded" and "api_key" not in answer.json()
        assert 1 <= int(answer.headers["retry-after"]) <= 60
    assert metric(setup, "fairgate_jwt_exchanges_total", outcome="rate_limited") - limited == 3
    # a refused exchange stored no secret: had it, it would have revoked the oldest of the
    # identity's 100 live keys (max_keys), which is still served past the cache's second
    time.sleep(2 * WITHIN)
    assert chat(setup, given[-100]).status_code == 200
    with sqlite3.connect(setup.db) as db:
        (live,) = db.execute(
            "SELECT count(*) FROM person_keys WHERE key_id = ?",
            (person_key_id(setup.ci.issuer, sub),),
        ).fetchone()
    assert live == 100
    # the count is the identity's own: another workload of the same issuer is served
    other = setup.ci.mint(sub=sub + "-other", aud="fairgate-ci", project_path="lab/infer")
    assert chat(setup, _exchange(setup, other)["api_key"]).status_code == 200


def test_an_issuer_that_does_not_answer_stops_the_start_up_with_one_line(
    tmp_path: Path,
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    config = write_config(
        tmp_path,
        [model("m", upstreams=[{"name": "r0", "url": "http://127.0.0.1:9"}])],
        jwt={"issuer": down, "audience": "fairgate", "map": [{"value": "g", "team": "t"}]},
    )
    ran = subprocess.run(
        [sys.executable, "-m", "fairgate", "serve", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode != 0
    ours = [line for line in ran.stderr.splitlines() if line.startswith("fairgate serve:")]
    assert len(ours) == 1 and down in ours[0], ran.stderr
    assert "Traceback" not in ran.stderr


def test_with_optional_at_start_the_gateway_starts_and_takes_tokens_once_the_issuer_answers(
    tmp_path: Path,
) -> None:
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    with SimProcess("--model", "m", "--speed", "0") as sim:
        config = write_config(
            tmp_path,
            [model("m", sim)],
            jwt={
                "issuer": issuer,
                "audience": "fairgate",
                "optional_at_start": True,
                "map": [{"value": "lab-t", "team": "t"}],
            },
        )
        with GatewayProcess(config, startup_timeout=120) as gateway:
            assert chat_at(gateway, TEST_KEY).status_code == 200  # keys work meanwhile
            with OidcProvider("--port", str(port)) as provider:
                assert provider.issuer == issuer
                token = provider.mint(sub="late", groups=["lab-t"])
                deadline = time.monotonic() + 60
                while chat_at(gateway, token).status_code != 200:
                    assert time.monotonic() < deadline, "the issuer was never asked again"
                    time.sleep(0.5)


def chat_at(gateway: GatewayProcess, bearer: str) -> httpx.Response:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        json=CHAT,
        headers={"authorization": f"Bearer {bearer}"},
        timeout=30,
    )
