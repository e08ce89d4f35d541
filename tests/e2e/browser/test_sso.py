"""Single sign-on for administrators in Chromium, against the test OpenID provider as a process.

The browser opens the gateway's admin listener at /admin/login, is sent to the provider's
authorize page (its sign-in form, filled here), comes back to /admin/callback and lands on
the dashboard with a session cookie. An organisation admin bound by a group claim sees
their organisation only: its teams and its spend, in the dashboard and in the admin API,
another organisation's team refused. Somebody whose claims match no binding and who has no
store role is refused at the callback with a page saying so. Logging out (the API, or the
dashboard's button) answers the provider's end-session URL, which the browser visits, and
the old cookie opens nothing. A
role removed in the store, or the store user disabled, ends what the session can do on the
very next admin request. The gateway, the simulator, the provider and the ``fairgate`` CLI
are separate processes; nothing is mocked.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest
from tests.e2e.browser.conftest import MASTER_KEY, MODEL, FrontDoor, StartFrontDoor
from tests.e2e.browser.harness import Screenshots, fairgate_cli, free_port, off_loop
from tests.e2e.browser.people import SESSION_COOKIE, session_cookie
from tests.e2e.conftest import TEST_KEY, add_key
from tests.oidc_provider.fixture import OidcProvider, oidc_provider, start_oidc_provider

__all__ = ["oidc_provider", "start_oidc_provider"]  # the fixtures

pytestmark = pytest.mark.slow

CLIENT_ID = "fairgate-admin"
CLIENT_SECRET = "a-client-secret-for-the-browser-sso-test"
ORGS = [
    {"name": "A", "share": 0.6, "teams": ["t", "t-a2"]},
    {"name": "B", "share": 0.4, "teams": ["tb"]},
]
ROLES = [{"value": "a-admins", "role": "org_admin", "org": "A"}]


class SsoDoor:
    """The front door with an ``sso:`` block on its admin listener, and its provider."""

    def __init__(self, door: FrontDoor, provider: OidcProvider) -> None:
        self.door = door
        self.provider = provider

    @property
    def admin(self) -> str:
        return self.door.admin_url

    def cli(self, *args: str) -> str:
        done = fairgate_cli(self.door.config, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def sign_in(self, page: Any, username: str, groups: str, shots: Screenshots) -> Any:
        """/admin/login in ``page``, the provider's form filled in; the callback's answer."""
        page.goto(self.admin + "/admin/login")
        assert page.url.startswith(self.provider.issuer + "/authorize?"), page.url
        shots.take(page, f"provider-sign-in-{username}")
        page.fill("#username", username)
        page.fill("#groups", groups)
        with (
            page.expect_response(lambda r: "/admin/callback" in r.url) as callback,
            page.expect_navigation(),
        ):
            page.click("#approve")
        page.wait_for_load_state()
        return callback.value

    def json_page(self, page: Any, path: str) -> tuple[int, Any]:
        """``path`` of the admin API opened in the browser (its cookie): status and body."""
        answer = page.goto(self.admin + path)
        return answer.status, orjson.loads(page.inner_text("body"))


@pytest.fixture
def sso(start_front_door: StartFrontDoor, oidc_provider: OidcProvider, tmp_path: Path) -> SsoDoor:
    admin_port = free_port()
    redirect = f"http://localhost:{admin_port}/admin/callback"
    oidc_provider.call(
        "POST",
        "/_test/clients",
        {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": [redirect]},
    )
    secret = tmp_path / "sso.secret"
    secret.write_text(CLIENT_SECRET + "\n")
    door = start_front_door(
        "--speed",
        "200",
        pool="p",
        pools=[{"name": "p", "capacity": 4}],
        admin_listen={"host": "127.0.0.1", "port": admin_port},
        orgs=ORGS,
        sso={
            "issuer": oidc_provider.issuer,
            "client_id": CLIENT_ID,
            "client_secret_file": str(secret),
            "redirect_url": redirect,
            "scopes": ["openid", "profile", "groups"],
            "role": ROLES,
        },
    )
    return SsoDoor(door, oidc_provider)


def _spend(door: FrontDoor) -> list[dict[str, Any]]:
    answer = httpx.get(
        door.admin_url + "/admin/spend",
        params=_spend_params(),
        headers={"authorization": f"Bearer {MASTER_KEY}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    rows: list[dict[str, Any]] = answer.json()["data"]
    return rows


def _spend_params() -> dict[str, str]:
    today = datetime.now(UTC).date()
    return {
        "from": str(today - timedelta(days=1)),
        "to": str(today + timedelta(days=1)),
        "group_by": "org,team",
    }


def _usage_in_both_orgs(door: FrontDoor) -> None:
    """One chat request by a key of team t (org A) and one of team tb (org B), then wait
    until the master key's spend report holds both."""
    other = off_loop(lambda: add_key(door.config, "tb"))
    for secret in (TEST_KEY, other):
        answer = httpx.post(
            door.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {secret}"},
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 30
    while {r["org"] for r in _spend(door)} != {"A", "B"}:
        assert time.monotonic() < deadline, f"spend never showed both orgs: {_spend(door)}"
        time.sleep(0.2)


def _dead(door: FrontDoor, cookie: str) -> bool:
    """Whether the admin API refuses ``cookie`` (presented alone, outside the browser)."""
    answer = httpx.get(
        door.admin_url + "/admin/session", headers={"cookie": f"{SESSION_COOKIE}={cookie}"}
    )
    return answer.status_code == 401


def test_an_org_admin_signs_in_sees_only_their_organisation_and_logs_out(
    sso: SsoDoor, context: Any, page: Any, shots: Screenshots
) -> None:
    _usage_in_both_orgs(sso.door)
    page.goto(sso.admin + "/admin/dashboard")
    shots.take(page, "dashboard-before-sign-in")
    assert ">A<" not in page.content()

    callback = sso.sign_in(page, "ada", "a-admins, staff", shots)
    assert callback.status == 303
    assert page.url == sso.admin + "/admin/dashboard", page.url
    shots.take(page, "dashboard-signed-in")
    content = page.content()
    assert "sso:ada" in content
    assert ">A<" in content and ">B<" not in content
    cookie = session_cookie(context)
    assert cookie is not None and cookie["secure"] and cookie["httpOnly"]
    assert not any(c["name"] == "__Host-fairgate-sso" for c in context.cookies())  # login over
    (authorize,) = sso.provider.call("GET", "/_test/logins")["authorize"]
    assert authorize["code_challenge_method"] == "S256" and len(authorize["nonce"]) >= 32

    status, me = sso.json_page(page, "/admin/whoami")
    shots.take(page, "whoami")
    assert status == 200
    assert me == {"name": "sso:ada", "roles": [{"role": "org_admin", "scope": "org:A"}]}
    status, teams = sso.json_page(page, "/admin/teams")
    shots.take(page, "teams")
    assert status == 200 and sorted(t["name"] for t in teams["data"]) == ["t", "t-a2"]
    status, orgs = sso.json_page(page, "/admin/orgs")
    assert status == 200 and [o["name"] for o in orgs["data"]] == ["A"]
    status, spent = sso.json_page(
        page, "/admin/spend?" + "&".join(f"{k}={v}" for k, v in _spend_params().items())
    )
    shots.take(page, "spend")
    assert status == 200
    assert {(r["org"], r["team"]) for r in spent["data"]} == {("A", "t")}
    status, refused = sso.json_page(page, "/admin/teams/tb")
    shots.take(page, "other-orgs-team-refused")
    assert status in (403, 404) and refused["error"]["type"]
    status, spent = sso.json_page(
        page, "/admin/spend?org=B&" + "&".join(f"{k}={v}" for k, v in _spend_params().items())
    )
    assert status == 200 and spent["data"] == []  # B's spend exists, but not for her

    page.goto(sso.admin + "/admin/dashboard")
    held = cookie["value"]
    logout = page.evaluate(
        """async () => {
            const session = await (await fetch('/admin/session')).json();
            const answer = await fetch('/admin/logout', {
                method: 'POST', headers: {'X-CSRF-Token': session.csrf_token}});
            return {status: answer.status, body: await answer.json()};
        }"""
    )
    assert logout["status"] == 200, logout
    url = logout["body"]["end_session_url"]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == sso.provider.issuer + "/logout"
    assert parse_qs(parts.query)["client_id"] == [CLIENT_ID]
    page.goto(url)
    shots.take(page, "provider-signed-out")
    assert page.inner_text("#out") == "Signed out"
    (ended,) = sso.provider.call("GET", "/_test/logins")["logout"]
    assert ended["id_token_hint"].count(".") == 2
    assert session_cookie(context) is None
    assert _dead(sso.door, held)
    page.goto(sso.admin + "/admin/dashboard")
    shots.take(page, "dashboard-after-logout")
    assert "sso:ada" not in page.content() and ">A<" not in page.content()


def test_somebody_without_a_role_is_refused_at_the_callback(
    sso: SsoDoor, context: Any, page: Any, shots: Screenshots
) -> None:
    callback = sso.sign_in(page, "eve", "students", shots)
    shots.take(page, "refused-at-callback")
    assert callback.status == 403
    assert urlsplit(page.url).path == "/admin/callback"
    text = page.inner_text("body")
    assert "signed in at your identity provider" in text and "no administrator role" in text
    assert session_cookie(context) is None
    page.goto(sso.admin + "/admin/teams")
    assert "error" in orjson.loads(page.inner_text("body"))
    assert "eve" not in page.inner_text("body")


def test_a_role_removed_or_a_user_disabled_in_the_store_applies_on_the_next_request(
    sso: SsoDoor, chromium: Any, shots: Screenshots
) -> None:
    # carol's only role is in the store: team_admin of B's team tb
    sso.cli("users", "create", "carol")
    sso.cli("users", "grant", "carol", "team_admin", "--team", "tb")
    carol_context = chromium.new_context()
    carol = carol_context.new_page()
    assert sso.sign_in(carol, "carol", "", shots).status == 303
    status, teams = sso.json_page(carol, "/admin/teams")
    shots.take(carol, "carol-teams")
    assert status == 200 and [t["name"] for t in teams["data"]] == ["tb"]
    sso.cli("users", "revoke-role", "carol", "team_admin", "--team", "tb")
    status, refused = sso.json_page(carol, "/admin/teams")
    shots.take(carol, "carol-after-revoke")
    assert status == 401, refused
    carol_context.close()

    # ada: org_admin by her claims, and a store user of the same name, then disabled
    sso.cli("users", "create", "ada")
    ada_context = chromium.new_context()
    ada = ada_context.new_page()
    assert sso.sign_in(ada, "ada", "a-admins", shots).status == 303
    assert ada.url == sso.admin + "/admin/dashboard"
    shots.take(ada, "ada-dashboard")
    assert "user:ada" in ada.content() and ">A<" in ada.content()
    held = session_cookie(ada_context)
    assert held is not None
    sso.cli("users", "disable", "ada")
    ada.goto(sso.admin + "/admin/dashboard")
    shots.take(ada, "ada-after-disable")
    assert "user:ada" not in ada.content() and ">A<" not in ada.content()
    status, _ = sso.json_page(ada, "/admin/orgs")
    assert status == 401
    assert _dead(sso.door, held["value"])
    ada_context.close()


def test_the_dashboards_sign_out_ends_the_session_and_links_to_the_providers_end_session(
    sso: SsoDoor, context: Any, page: Any, shots: Screenshots
) -> None:
    assert sso.sign_in(page, "ada", "a-admins", shots).status == 303
    held = session_cookie(context)
    assert held is not None
    with page.expect_navigation():
        page.click("form[action='/admin/signout'] button[type=submit]")
    shots.take(page, "signed-out-at-the-gateway")
    assert page.url == sso.admin + "/admin/signout"
    assert session_cookie(context) is None and _dead(sso.door, held["value"])
    with page.expect_navigation():
        page.click("#provider-signout")
    shots.take(page, "signed-out-at-the-provider")
    assert page.inner_text("#out") == "Signed out"
    (ended,) = sso.provider.call("GET", "/_test/logins")["logout"]
    assert ended["client_id"] == CLIENT_ID and ended["id_token_hint"].count(".") == 2
