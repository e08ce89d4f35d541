"""The dashboard's sign-in form, admin web sessions and sign-out, over HTTP on the real Gateway.

The session cookie is ``Secure``: these tests speak plain HTTP through ASGI, so they
carry it by hand in a ``Cookie`` header, as a browser would on ``https://`` or localhost.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from admin.dashboard_gateway import MASTER, OPERATOR, Board, board, pg_database, sim, store_section
from fairgate.accounts import COOKIE
from fairgate.auth.secrets import sha256

__all__ = ["board", "pg_database", "sim", "store_section"]  # the fixtures

FORM = {"content-type": "application/x-www-form-urlencoded"}


async def _sign_in(board: Board, secret: str, **headers: str) -> httpx.Response:
    body = urlencode({"secret": secret})
    return await board.admin.post("/admin/signin", content=body, headers={**FORM, **headers})


def _cookie(answer: httpx.Response) -> str:
    header = answer.headers["set-cookie"]
    found = re.match(rf"{COOKIE}=([^;]+);", header)
    assert found, header
    return found.group(1)


def _as(cookie: str) -> dict[str, str]:
    return {"cookie": f"{COOKIE}={cookie}"}


async def _get(board: Board, path: str, cookie: str) -> httpx.Response:
    return await board.admin.get(path, headers=_as(cookie))


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found
    return found.group(1)


async def test_a_browser_without_a_credential_is_sent_to_the_form(board: Board) -> None:
    answer = await board.admin.get("/admin/dashboard")
    assert answer.status_code == 303 and answer.headers["location"] == "/admin/signin"
    assert (await board.admin.get("/admin/dashboard/live")).status_code == 401
    form = await board.admin.get("/admin/signin")
    assert form.status_code == 200
    assert '<form method="post" action="/admin/signin">' in form.text
    assert 'type="password"' in form.text
    assert "frame-ancestors 'none'" in form.headers["content-security-policy"]
    # a key in the address signs nobody in
    in_url = await board.admin.get("/admin/signin", params={"secret": MASTER})
    assert "set-cookie" not in in_url.headers


async def test_a_rotated_master_key_ends_the_sessions_it_opened(board: Board) -> None:
    cookie = _cookie(await _sign_in(board, MASTER))
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 200
    # the key leaked and is rotated (what a vault rotation calls; a restart with a new
    # key file gives the same authenticator the new digest)
    rotated = "a-new-master-key-after-a-leak"
    app: Any = board.gateway.admin_app
    while not hasattr(app, "state"):  # through the listener's middleware to the FastAPI app
        app = app.app
    app.state.authenticator.set_master_key_sha256(sha256(rotated))
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 401
    assert (await _get(board, "/admin/dashboard", cookie)).status_code == 303
    # the new key signs in, and its session lives
    fresh = _cookie(await _sign_in(board, rotated))
    assert (await _get(board, "/admin/dashboard/live", fresh)).status_code == 200


async def test_the_master_key_opens_a_strict_secure_session_and_sign_out_kills_it(
    board: Board,
) -> None:
    answer = await _sign_in(board, MASTER)
    assert answer.status_code == 303 and answer.headers["location"] == "/admin/dashboard"
    set_cookie = answer.headers["set-cookie"].lower()
    for attribute in ("secure", "httponly", "samesite=strict", "path=/"):
        assert attribute in set_cookie
    assert "domain" not in set_cookie and MASTER.lower() not in set_cookie
    cookie = _cookie(answer)
    page = await _get(board, "/admin/dashboard", cookie)
    assert page.status_code == 200 and "signed in as master-key" in page.text
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 200
    csrf = _csrf(page.text)

    # without the page's token (a forged form), the session survives
    forged = await board.admin.post(
        "/admin/signout", content="csrf=0123", headers={**FORM, **_as(cookie)}
    )
    assert forged.status_code == 403
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 200

    out = await board.admin.post(
        "/admin/signout", content=f"csrf={csrf}", headers={**FORM, **_as(cookie)}
    )
    assert out.status_code == 303 and out.headers["location"] == "/admin/signin"
    assert f"{COOKIE}=" in out.headers["set-cookie"]
    # the old cookie is dead in the store, not only in this browser
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 401
    assert (await _get(board, "/admin/dashboard", cookie)).status_code == 303


async def test_a_wrong_key_is_a_401_form_and_a_spray_gets_429_and_is_audited(
    board: Board,
) -> None:
    wrong = await _sign_in(board, "not-the-master-key")
    assert wrong.status_code == 401 and "That key was not accepted." in wrong.text
    assert "set-cookie" not in wrong.headers and "not-the-master-key" not in wrong.text
    statuses = [(await _sign_in(board, f"fga-guess-{i}")).status_code for i in range(10)]
    assert statuses[-1] == 429, statuses
    limited = await _sign_in(board, "fga-one-more")
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    events = await board.gateway.tenancy.audit.list(OPERATOR, action="auth.failed")
    assert len(events) >= 5 and all(e.remote == "10.9.8.7" for e in events)
    # as on the admin API, the master key is never locked out by a spray
    assert (await _sign_in(board, MASTER)).status_code == 303


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": "http://evil.test"},
        {"origin": "null"},
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"sec-fetch-site": "cross-site", "origin": "http://admin.test"},
    ],
)
async def test_a_form_posted_from_another_site_is_refused(
    board: Board, headers: dict[str, str]
) -> None:
    answer = await _sign_in(board, MASTER, **headers)
    assert answer.status_code == 403 and "set-cookie" not in answer.headers
    cookie = _cookie(await _sign_in(board, MASTER))
    page = await _get(board, "/admin/dashboard", cookie)
    out = await board.admin.post(
        "/admin/signout",
        content=f"csrf={_csrf(page.text)}",
        headers={**FORM, **_as(cookie), **headers},
    )
    assert out.status_code == 403
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 200
    same = await _sign_in(
        board, MASTER, origin="http://admin.test", **{"sec-fetch-site": "same-origin"}
    )
    assert same.status_code == 303
    # what Chromium sends under a strict referrer policy: Origin null, but same-origin
    null = await _sign_in(board, MASTER, origin="null", **{"sec-fetch-site": "same-origin"})
    assert null.status_code == 303


async def test_a_token_session_follows_the_users_roles_at_once(board: Board) -> None:
    token = await board.token_for("olga", "org_admin", org="A")
    cookie = _cookie(await _sign_in(board, token))
    page = await _get(board, "/admin/dashboard", cookie)
    assert page.status_code == 200 and "signed in as user:olga" in page.text
    assert 'data-org="A"' in page.text and 'data-org="B"' not in page.text
    await board.gateway.tenancy.roles.revoke(OPERATOR, user="olga", role="org_admin", org="A")
    refused = await _get(board, "/admin/dashboard/live", cookie)
    assert refused.status_code == 403 and 'data-org="A"' not in refused.text
    await board.gateway.tenancy.roles.grant(OPERATOR, user="olga", role="viewer", org="A")
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 200
    await board.gateway.tenancy.users.disable(OPERATOR, "olga")
    assert (await _get(board, "/admin/dashboard/live", cookie)).status_code == 401


async def test_a_credential_that_reads_no_standings_opens_no_session(board: Board) -> None:
    member = await board.token_for("max", "member", team="t")
    answer = await _sign_in(board, member)
    assert answer.status_code == 403 and "set-cookie" not in answer.headers


async def test_an_account_session_from_the_web_pages_opens_nothing_here(board: Board) -> None:
    accounts = board.gateway.accounts
    email, password = "ada@example.org", "a long enough passphrase"
    await accounts.sign_up(email, password)
    await accounts.approve(OPERATOR, email, team="t")
    opened = await accounts.sign_in(email, password, network="127.0.0.1")
    answer = await _get(board, "/admin/dashboard", opened.cookie_value)
    assert answer.status_code == 303 and answer.headers["location"] == "/admin/signin"


async def _account_session(board: Board) -> str:
    """A web front door session's cookie value (the front door's cookie has this name too)."""
    accounts = board.gateway.accounts
    if not await accounts.list():
        await accounts.sign_up("ada@example.org", "a long passphrase here")
        await accounts.approve(OPERATOR, "ada@example.org", team="t")
    opened = await accounts.sign_in("ada@example.org", "a long passphrase here", network="1.2.3.4")
    assert await board.gateway.sessions.resolve(opened.cookie_value) is not None
    return opened.cookie_value


async def test_a_dashboard_sign_in_or_out_ends_the_front_door_session_its_cookie_named(
    board: Board,
) -> None:
    # one cookie name for both kinds: the dashboard's sign-in replaced the browser's front
    # door cookie, and its sign-out deleted it, but the account's session stayed open in
    # the store until its timeout (a copy of the cookie still opened /account)
    sessions = board.gateway.sessions
    web = await _account_session(board)
    signed = await _sign_in(board, MASTER, **_as(web))
    assert signed.status_code == 303
    assert await sessions.resolve(web) is None
    assert await sessions.resolve(_cookie(signed)) is not None

    web = await _account_session(board)
    out = await board.admin.post("/admin/signout", content="csrf=x", headers={**FORM, **_as(web)})
    assert out.status_code == 303 and f"{COOKIE}=" in out.headers["set-cookie"]
    assert await sessions.resolve(web) is None
