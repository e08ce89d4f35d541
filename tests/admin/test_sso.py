"""Single sign-on for administrators, against the test OpenID provider as a real process.

The real Gateway runs in this test's event loop (its admin app called through ASGI);
the provider is ``python -m tests.oidc_provider`` on a loopback port, which the
gateway reaches over real HTTP for discovery, its keys and the token endpoint.
The test plays the browser: it follows the redirects and carries the ``Secure``
cookies by hand (plain HTTP through ASGI), as a browser does on https or localhost.
The browser itself signs in through Chromium in tests/e2e/browser/test_sso.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import func, select
from tests.e2e.conftest import model, pg_database, store_section, write_config
from tests.oidc_provider.fixture import OidcProvider, oidc_provider, start_oidc_provider

from fairgate.accounts import COOKIE
from fairgate.admin.sso import client as sso_client
from fairgate.admin.sso.client import LOGIN_COOKIE, STARTS_PER_MINUTE
from fairgate.app import Gateway
from fairgate.config import load_config
from fairgate.sim.process import SimProcess
from fairgate.store.tables import sso_logins, web_sessions
from fairgate.tenancy import Actor

__all__ = [  # the fixtures
    "oidc_provider",
    "pg_database",
    "start_oidc_provider",
    "store_section",
]

pytestmark = pytest.mark.slow

OPERATOR = Actor.operator("tests")
CLIENT_ID = "fairgate-admin"
SECRET = "a-client-secret-for-the-sso-tests"
REDIRECT = "http://localhost/admin/callback"
ROLES = [
    {"value": "a-admins", "role": "org_admin", "org": "A"},
    {"value": "root-admins", "role": "proxy_admin"},
]
ADA = {"sub": "s-ada", "preferred_username": "ada", "groups": ["a-admins", "other"]}
SCIM_TOKEN = "scim-" + "t0ken" * 8


@dataclass
class Sso:
    gateway: Gateway
    admin: httpx.AsyncClient
    provider: OidcProvider

    async def login_as(self, person: dict[str, Any]) -> None:
        await asyncio.to_thread(self.provider.call, "POST", "/_test/login-as", person)

    async def seen(self) -> dict[str, list[dict[str, str]]]:
        result: dict[str, list[dict[str, str]]] = await asyncio.to_thread(
            self.provider.call, "GET", "/_test/logins"
        )
        return result

    async def start(self) -> tuple[str, str]:
        """GET /admin/login: the provider's authorize URL and the login cookie."""
        answer = await self.admin.get("/admin/login")
        assert answer.status_code == 303, answer.text
        return answer.headers["location"], _cookie(answer, LOGIN_COOKIE)

    async def at_provider(self, authorize_url: str) -> dict[str, str]:
        """The provider's redirect back: the callback's query (code, state...)."""
        async with httpx.AsyncClient() as browser:
            answer = await browser.get(authorize_url)
        assert answer.status_code == 303, answer.text
        location = answer.headers["location"]
        assert location.startswith(REDIRECT)
        return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}

    async def callback(self, query: dict[str, str], login_cookie: str | None) -> httpx.Response:
        headers = {"cookie": f"{LOGIN_COOKIE}={login_cookie}"} if login_cookie else {}
        return await self.admin.get("/admin/callback", params=query, headers=headers)

    async def sign_in(self, person: dict[str, Any]) -> httpx.Response:
        await self.login_as(person)
        url, login_cookie = await self.start()
        return await self.callback(await self.at_provider(url), login_cookie)

    async def session_of(self, person: dict[str, Any]) -> str:
        answer = await self.sign_in(person)
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/admin/dashboard"
        return _cookie(answer, COOKIE)

    async def get(self, path: str, cookie: str, **headers: str) -> httpx.Response:
        return await self.admin.get(path, headers={"cookie": f"{COOKIE}={cookie}", **headers})

    async def post(self, path: str, cookie: str, **kwargs: Any) -> httpx.Response:
        headers = {"cookie": f"{COOKIE}={cookie}", **kwargs.pop("headers", {})}
        return await self.admin.post(path, headers=headers, **kwargs)


def _cookie(answer: httpx.Response, name: str) -> str:
    for header in answer.headers.get_list("set-cookie"):
        found = re.match(rf"{re.escape(name)}=([^;]+);", header)
        if found:
            assert "Secure" in header and "HttpOnly" in header and "Path=/" in header
            assert "SameSite=lax" in header
            return found.group(1)
    raise AssertionError(f"no {name} cookie in {answer.headers.get_list('set-cookie')}")


def _sets_session(answer: httpx.Response) -> bool:
    return any(h.startswith(f"{COOKIE}=") for h in answer.headers.get_list("set-cookie"))


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    with SimProcess("--model", "m", "--speed", "200", "--record", "0") as engine:
        yield engine


async def _gateway(
    tmp_path: Path,
    sim: SimProcess,
    provider: OidcProvider,
    store: dict[str, str] | None = None,
    **sso: Any,
) -> AsyncIterator[Sso]:
    (tmp_path / "sso.secret").write_text(SECRET + "\n")
    secret = sso.pop("secret", True)
    extra: dict[str, Any] = {}
    if sso.pop("scim", False):
        (tmp_path / "scim.token").write_text(SCIM_TOKEN)
        extra["scim"] = {"token_file": "scim.token"}
    client: dict[str, Any] = {"client_id": CLIENT_ID, "redirect_uris": [REDIRECT]}
    if secret:
        client["client_secret"] = SECRET
        sso.setdefault("client_secret_file", "sso.secret")
    client["post_logout_redirect_uris"] = ["http://localhost/bye"]
    await asyncio.to_thread(provider.call, "POST", "/_test/clients", client)
    section = {
        "issuer": provider.issuer,
        "client_id": CLIENT_ID,
        "redirect_url": REDIRECT,
        "scopes": ["openid", "profile", "groups"],
        "role": ROLES,
        **sso,
    }
    path = await asyncio.to_thread(
        write_config,
        tmp_path,
        [model("m", sim, pool="p")],
        pools=[{"name": "p", "capacity": 4}],
        orgs=[
            {"name": "A", "share": 0.6, "teams": ["t"]},
            {"name": "B", "share": 0.4, "teams": ["tb"]},
        ],
        sso=section,
        logging={"level": "warning"},
        store=store or {"url": "sqlite:///fairgate.db"},
        **extra,
    )
    gateway = Gateway(load_config(path))
    await gateway.start()
    admin = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway.admin_app, client=("10.9.8.7", 40000)),
        base_url="http://localhost",
    )
    try:
        yield Sso(gateway, admin, provider)
    finally:
        await admin.aclose()
        await gateway.stop()


@pytest.fixture
async def sso(tmp_path: Path, sim: SimProcess, oidc_provider: OidcProvider) -> AsyncIterator[Sso]:
    async for built in _gateway(tmp_path, sim, oidc_provider):
        yield built


async def test_an_org_admin_signs_in_and_sees_only_their_organisation(sso: Sso) -> None:
    cookie = await sso.session_of(ADA)
    session = (await sso.get("/admin/session", cookie)).json()
    assert session["name"] == "sso:ada" and session["sso"] is True
    assert [r["role"] for r in session["roles"]] == ["org_admin"]
    assert re.fullmatch(r"[0-9a-f]{64}", session["csrf_token"])
    orgs = await sso.get("/admin/orgs", cookie)
    assert orgs.status_code == 200
    assert [o["name"] for o in orgs.json()["data"]] == ["A"]
    teams = (await sso.get("/admin/teams", cookie)).json()["data"]
    assert [t["name"] for t in teams] == ["t"]
    page = await sso.get("/admin/dashboard", cookie)
    assert page.status_code == 200 and "sso:ada" in page.text
    assert ">A<" in page.text and ">B<" not in page.text


async def test_whoami_reports_the_roles_the_session_acts_with_not_proxy_admin(sso: Sso) -> None:
    # no store user: the actor has no user id, yet holds only its claims' org_admin
    cookie = await sso.session_of(ADA)
    me = (await sso.get("/admin/whoami", cookie)).json()
    assert me == {"name": "sso:ada", "roles": [{"role": "org_admin", "scope": "org:A"}]}
    # a store user of the same name: their store roles and the claims' both
    tenancy = sso.gateway.tenancy
    await tenancy.users.create(OPERATOR, "bob")
    await tenancy.roles.grant(OPERATOR, user="bob", role="viewer", team="tb")
    bob = await sso.session_of(
        {"sub": "s-bob", "preferred_username": "bob", "groups": ADA["groups"]}
    )
    me = (await sso.get("/admin/whoami", bob)).json()
    assert me["name"] == "user:bob"
    assert sorted(me["roles"], key=str) == sorted(
        [{"role": "viewer", "scope": "team:tb"}, {"role": "org_admin", "scope": "org:A"}], key=str
    )


async def test_the_flow_sends_pkce_s256_state_and_nonce_and_the_secret(sso: Sso) -> None:
    await sso.session_of(ADA)
    seen = await sso.seen()
    (authorize,) = seen["authorize"]
    assert authorize["code_challenge_method"] == "S256"
    assert len(authorize["code_challenge"]) == 43  # base64url of a SHA-256
    assert len(authorize["state"]) >= 32 and len(authorize["nonce"]) >= 32
    assert authorize["client_id"] == CLIENT_ID and authorize["redirect_uri"] == REDIRECT
    assert "client_secret" not in authorize
    (token,) = seen["token"]
    assert "client_secret" not in token  # sent in the Basic header (the provider checked it)


async def test_somebody_with_neither_binding_nor_store_role_is_refused_at_the_callback(
    sso: Sso,
) -> None:
    answer = await sso.sign_in({"sub": "s-eve", "preferred_username": "eve", "groups": ["x"]})
    assert answer.status_code == 403
    assert "no administrator role" in answer.text
    assert not _sets_session(answer)
    rows = await _session_rows(sso)
    assert rows == 0


async def _session_rows(sso: Sso) -> int:

    async with sso.gateway.store.read() as conn:
        count: int = (
            await conn.execute(select(func.count()).select_from(web_sessions))
        ).scalar_one()
    return count


async def test_a_store_role_alone_signs_in_and_its_revocation_applies_at_once(sso: Sso) -> None:
    tenancy = sso.gateway.tenancy
    await tenancy.users.create(OPERATOR, "carol")
    await tenancy.roles.grant(OPERATOR, user="carol", role="team_admin", team="tb")
    cookie = await sso.session_of({"sub": "s-carol", "preferred_username": "carol"})
    session = (await sso.get("/admin/session", cookie)).json()
    assert session["name"] == "user:carol"
    assert [r["role"] for r in session["roles"]] == ["team_admin"]
    assert [t["name"] for t in (await sso.get("/admin/teams", cookie)).json()["data"]] == ["tb"]
    await tenancy.roles.revoke(OPERATOR, user="carol", role="team_admin", team="tb")
    assert (await sso.get("/admin/session", cookie)).status_code == 401
    assert (await sso.get("/admin/teams", cookie)).status_code == 401


async def test_a_disabled_user_loses_the_session_whatever_the_claims_say(sso: Sso) -> None:
    tenancy = sso.gateway.tenancy
    await tenancy.users.create(OPERATOR, "ada")
    await tenancy.roles.grant(OPERATOR, user="ada", role="viewer", team="tb")
    cookie = await sso.session_of(ADA)
    roles = (await sso.get("/admin/session", cookie)).json()["roles"]
    assert sorted(r["role"] for r in roles) == ["org_admin", "viewer"]  # claims + store
    await tenancy.users.disable(OPERATOR, "ada")
    assert (await sso.get("/admin/session", cookie)).status_code == 401
    assert (await sso.get("/admin/orgs", cookie)).status_code == 401
    # and signing in again is refused at the callback
    again = await sso.sign_in(ADA)
    assert again.status_code == 403 and not _sets_session(again)
    # enabled again: the session was ended, not suspended
    await tenancy.users.enable(OPERATOR, "ada")
    assert (await sso.get("/admin/session", cookie)).status_code == 401


async def test_a_disabled_user_named_in_another_case_ends_the_session_too(sso: Sso) -> None:
    # SCIM's userName is not case-exact: a provider provisions "Ada" and its ID tokens say
    # "ada"; deactivating "Ada" must end the session that "ada"'s claims alone opened
    tenancy = sso.gateway.tenancy
    await tenancy.users.create(OPERATOR, "Ada")
    cookie = await sso.session_of(ADA)
    assert (await sso.get("/admin/orgs", cookie)).status_code == 200
    await tenancy.users.disable(OPERATOR, "Ada")
    assert (await sso.get("/admin/session", cookie)).status_code == 401
    assert (await sso.get("/admin/orgs", cookie)).status_code == 401
    again = await sso.sign_in(ADA)
    assert again.status_code == 403 and not _sets_session(again)
    await tenancy.users.enable(OPERATOR, "Ada")
    assert (await sso.get("/admin/session", cookie)).status_code == 401


async def test_a_callback_without_the_browsers_login_or_with_another_state_is_refused(
    sso: Sso,
) -> None:
    await sso.login_as(ADA)
    url, login_cookie = await sso.start()
    query = await sso.at_provider(url)
    # another browser (no login cookie): a login CSRF attempt
    answer = await sso.callback(query, None)
    assert answer.status_code == 401 and not _sets_session(answer)
    # the right browser with a state the login did not send
    await sso.login_as(ADA)
    url, login_cookie = await sso.start()
    query = await sso.at_provider(url)
    answer = await sso.callback({**query, "state": "x" * 43}, login_cookie)
    assert answer.status_code == 401 and not _sets_session(answer)
    # that login was used up by the refusal: the right state now finds nothing
    assert (await sso.callback(query, login_cookie)).status_code == 401


async def test_a_replayed_callback_opens_nothing(sso: Sso) -> None:
    await sso.login_as(ADA)
    url, login_cookie = await sso.start()
    query = await sso.at_provider(url)
    first = await sso.callback(query, login_cookie)
    assert first.status_code == 303 and _sets_session(first)
    replay = await sso.callback(query, login_cookie)
    assert replay.status_code == 401 and not _sets_session(replay)


@pytest.mark.parametrize(
    "id_token",
    [
        {"claims": {"nonce": "not-the-nonce-this-login-sent"}},
        {"omit": ["nonce"]},
        {"claims": {"aud": "another-client"}},
        {"claims": {"iss": "http://127.0.0.1:1/elsewhere"}},
        {"claims": {"exp": 1_000_000_000}},
        {"omit": ["exp"]},
        {"attack": "none"},
        {"attack": "hs256-public-key"},
    ],
    ids=["nonce", "no-nonce", "aud", "iss", "expired", "no-exp", "alg-none", "hs256-public-key"],
)
async def test_a_bad_id_token_is_refused(sso: Sso, id_token: dict[str, Any]) -> None:
    answer = await sso.sign_in({**ADA, "id_token": id_token})
    assert answer.status_code == 401
    assert not _sets_session(answer)
    assert await _session_rows(sso) == 0


async def test_state_changing_admin_calls_with_the_cookie_need_the_csrf_token(sso: Sso) -> None:
    cookie = await sso.session_of({**ADA, "groups": ["root-admins"]})
    token = (await sso.get("/admin/session", cookie)).json()["csrf_token"]
    body = {"name": "newbie"}
    refused = await sso.post("/admin/users", cookie, json=body)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf"
    wrong = await sso.post("/admin/users", cookie, json=body, headers={"x-csrf-token": "0" * 64})
    assert wrong.status_code == 403
    cross = await sso.post(
        "/admin/users",
        cookie,
        json=body,
        headers={"x-csrf-token": token, "sec-fetch-site": "cross-site"},
    )
    assert cross.status_code == 403
    assert (await sso.get("/admin/users", cookie)).json()["data"] == []
    made = await sso.post("/admin/users", cookie, json=body, headers={"x-csrf-token": token})
    assert made.status_code == 201, made.text
    assert [u["name"] for u in (await sso.get("/admin/users", cookie)).json()["data"]] == ["newbie"]


async def test_logout_needs_the_token_ends_the_session_and_answers_the_end_session_url(
    sso: Sso,
) -> None:
    cookie = await sso.session_of(ADA)
    token = (await sso.get("/admin/session", cookie)).json()["csrf_token"]
    assert (await sso.post("/admin/logout", cookie)).status_code == 403
    assert (await sso.get("/admin/session", cookie)).status_code == 200  # still signed in
    cross = {"x-csrf-token": token, "sec-fetch-site": "cross-site"}
    assert (await sso.post("/admin/logout", cookie, headers=cross)).status_code == 403
    answer = await sso.post("/admin/logout", cookie, headers={"x-csrf-token": token})
    assert answer.status_code == 200
    url = answer.json()["end_session_url"]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == sso.provider.issuer + "/logout"
    params = parse_qs(parts.query)
    assert params["client_id"] == [CLIENT_ID]
    assert params["id_token_hint"][0].count(".") == 2
    assert (await sso.get("/admin/session", cookie)).status_code == 401
    assert (await sso.get("/admin/orgs", cookie)).status_code == 401


async def test_a_session_opened_on_one_replica_is_ended_on_another_by_logout(
    tmp_path: Path, sim: SimProcess, oidc_provider: OidcProvider, store_section: dict[str, str]
) -> None:
    async for sso in _gateway(tmp_path, sim, oidc_provider, store=store_section):
        await _logout_across_replicas(sso)


async def _logout_across_replicas(sso: Sso) -> None:
    # two gateways on one store: the provider sends the browser back to either
    second = Gateway(sso.gateway.config)
    await second.start()
    other = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=second.admin_app, client=("10.9.8.7", 40001)),
        base_url="http://localhost",
    )
    try:
        await sso.login_as(ADA)
        url, login_cookie = await sso.start()  # the login begins on the first replica
        query = await sso.at_provider(url)
        done = await other.get(  # and ends on the second
            "/admin/callback", params=query, headers={"cookie": f"{LOGIN_COOKIE}={login_cookie}"}
        )
        assert done.status_code == 303, done.text
        cookie = _cookie(done, COOKIE)
        on_second = {"cookie": f"{COOKIE}={cookie}"}
        assert (await sso.get("/admin/orgs", cookie)).status_code == 200
        token = (await other.get("/admin/session", headers=on_second)).json()["csrf_token"]
        out = await other.post("/admin/logout", headers={**on_second, "x-csrf-token": token})
        assert out.status_code == 200
        # the first replica refuses the cookie at once: no replica keeps it in memory
        assert (await sso.get("/admin/session", cookie)).status_code == 401
        assert (await sso.get("/admin/orgs", cookie)).status_code == 401
    finally:
        await other.aclose()
        await second.stop()


async def test_a_public_client_signs_in_with_pkce_alone(
    tmp_path: Path, sim: SimProcess, oidc_provider: OidcProvider
) -> None:
    async for sso in _gateway(tmp_path, sim, oidc_provider, secret=False):
        cookie = await sso.session_of(ADA)
        assert (await sso.get("/admin/session", cookie)).status_code == 200
        (token,) = (await sso.seen())["token"]
        assert token["client_id"] == CLIENT_ID


async def test_a_provider_that_does_not_answer_is_a_503_page(
    sso: Sso, oidc_provider: OidcProvider
) -> None:
    await asyncio.to_thread(oidc_provider.faults, discovery=503)
    answer = await sso.admin.get("/admin/login")
    assert answer.status_code == 503
    assert "identity provider" in answer.text
    await asyncio.to_thread(oidc_provider.faults, discovery=0)
    assert (await sso.admin.get("/admin/login")).status_code == 303


async def _login_rows(sso: Sso) -> int:
    async with sso.gateway.store.read() as conn:
        count: int = (await conn.execute(select(func.count()).select_from(sso_logins))).scalar_one()
    return count


def _browser_at(sso: Sso, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=sso.gateway.admin_app, client=(address, 40000)),
        base_url="http://localhost",
    )


async def test_a_flood_of_login_starts_from_one_network_is_refused_and_writes_no_rows(
    sso: Sso,
) -> None:
    # /admin/login needs no credential and stores a login: unbounded, anyone could fill
    # the store with rows at the rate of the requests
    for _ in range(STARTS_PER_MINUTE):
        assert (await sso.admin.get("/admin/login")).status_code == 303
    for _ in range(5):
        refused = await sso.admin.get("/admin/login")
        assert refused.status_code == 429
        assert 0 < float(refused.headers["retry-after"]) <= 60
        assert "too many sign-ins" in refused.text
        assert LOGIN_COOKIE not in refused.headers.get("set-cookie", "")
    assert await _login_rows(sso) == STARTS_PER_MINUTE
    async with _browser_at(sso, "10.20.30.40") as elsewhere:  # another network starts as usual
        assert (await elsewhere.get("/admin/login")).status_code == 303
    assert await _login_rows(sso) == STARTS_PER_MINUTE + 1


async def test_logins_in_progress_are_bounded_whatever_the_networks(
    sso: Sso, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sso_client, "MAX_PENDING", 30)
    statuses = []
    for net in range(4):  # four /24s, each under its own limits
        async with _browser_at(sso, f"10.{net}.0.1") as browser:
            for _ in range(10):
                statuses.append((await browser.get("/admin/login")).status_code)
    assert statuses == [303] * 30 + [503] * 10
    assert await _login_rows(sso) == 30
    async with _browser_at(sso, "10.99.0.1") as browser:
        busy = await browser.get("/admin/login")
    assert busy.status_code == 503 and "too many sign-ins are in progress" in busy.text


async def test_a_discovery_document_naming_another_issuer_is_not_used(
    tmp_path: Path, sim: SimProcess, oidc_provider: OidcProvider
) -> None:
    # configured with a trailing slash: the same document is fetched, but its issuer is
    # not the configured one, whole, so no login starts (OIDC Discovery §4.3)
    async for sso in _gateway(tmp_path, sim, oidc_provider, issuer=oidc_provider.issuer + "/"):
        answer = await sso.admin.get("/admin/login")
        assert answer.status_code == 503 and "identity provider" in answer.text
        assert (await sso.seen())["authorize"] == []


async def test_scim_deactivating_the_user_ends_their_sso_session_at_once(
    tmp_path: Path, sim: SimProcess, oidc_provider: OidcProvider
) -> None:
    async for sso in _gateway(tmp_path, sim, oidc_provider, scim=True):
        bearer = {"authorization": f"Bearer {SCIM_TOKEN}"}
        made = await sso.admin.post(
            "/scim/v2/Users",
            headers=bearer,
            json={"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "ada"},
        )
        assert made.status_code == 201, made.text
        cookie = await sso.session_of(ADA)
        assert (await sso.get("/admin/session", cookie)).json()["name"] == "user:ada"
        assert await _session_rows(sso) == 1
        patch = {
            "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
            "Operations": [{"op": "replace", "path": "active", "value": False}],
        }
        answer = await sso.admin.patch(
            f"/scim/v2/Users/{made.json()['id']}", headers=bearer, json=patch
        )
        assert answer.status_code in (200, 204), answer.text
        assert await _session_rows(sso) == 0  # deleted in the SCIM write's transaction
        assert (await sso.get("/admin/session", cookie)).status_code == 401
        assert (await sso.get("/admin/orgs", cookie)).status_code == 401
        assert (await sso.sign_in(ADA)).status_code == 403  # and no new session


async def test_a_case_only_rename_by_scim_keeps_the_person_signing_in(
    tmp_path: Path, sim: SimProcess, oidc_provider: OidcProvider
) -> None:
    # The provider changes "ada" to "Ada": the same person, renamed in place, not a new
    # user beside a disabled "ada" that would refuse every case of the name at sign-in
    async for sso in _gateway(tmp_path, sim, oidc_provider, scim=True):
        bearer = {"authorization": f"Bearer {SCIM_TOKEN}"}
        user = {"schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "ada"}
        made = await sso.admin.post("/scim/v2/Users", headers=bearer, json=user)
        assert made.status_code == 201, made.text
        tenancy = sso.gateway.tenancy
        await tenancy.roles.grant(OPERATOR, user="ada", role="viewer", team="tb")
        before = await tenancy.users.get(OPERATOR, "ada")
        renamed = await sso.admin.put(
            f"/scim/v2/Users/{made.json()['id']}",
            headers=bearer,
            json={**user, "userName": "Ada"},
        )
        assert renamed.status_code == 200, renamed.text
        after = await tenancy.users.get(OPERATOR, "Ada")
        assert after.id == before.id and after.disabled_at is None
        # no claim binding: the store role kept through the rename is what signs "Ada" in
        cookie = await sso.session_of({**ADA, "preferred_username": "Ada", "groups": []})
        assert (await sso.get("/admin/session", cookie)).json()["name"] == "user:Ada"
        assert (await sso.get("/admin/teams", cookie)).status_code == 200
        assert (await sso.sign_in(ADA)).status_code == 303  # the other case too
