"""A signed-in person visits a page of another origin whose form posts to the gateway: the
gateway refuses it and nothing changes (no key created, none revoked, still signed in).

Two attacker origins: http://127.0.0.1:P is another *site* (the session cookie, SameSite=Lax,
is not even sent); http://localhost:P is the same site on another port, so the browser does
send the cookie and only the gateway's own checks (Sec-Fetch-Site, Origin, the CSRF token)
stand in the way. Each layer is also attacked alone: the real CSRF token posted from the
other origin, and a wrong token posted without any browser marks.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from tests.e2e.browser.conftest import FrontDoor
from tests.e2e.browser.harness import Screenshots, fairgate_cli, second_origin
from tests.e2e.browser.people import SESSION_COOKIE, session_cookie, signed_in
from tests.e2e.browser.test_account_flow import create_key

pytestmark = pytest.mark.slow

EMAIL = "grace@example.org"
PASSWORD = "a long enough passphrase"


def team_keys(door: FrontDoor) -> list[dict[str, Any]]:
    listed = fairgate_cli(door.config, "keys", "list", "--team", "t", "--json")
    assert listed.returncode == 0, listed.stderr
    keys: list[dict[str, Any]] = orjson.loads(listed.stdout)
    return keys


def attack_page(action: str, fields: dict[str, str]) -> str:
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    return (
        "<!doctype html><title>win a prize</title>"
        f'<form method="post" action="{action}">{inputs}'
        '<button id="go" type="submit">claim your prize</button></form>'
    )


def csrf_token(page: Any) -> str:
    """The CSRF token of the page's first form (the attacker should never have it)."""
    token: str = page.get_attribute("form input[type=hidden]", "value") or ""
    assert token
    return token


@pytest.mark.parametrize("attacker_host", ["127.0.0.1", "localhost"])
def test_a_form_from_another_origin_changes_nothing(
    front_door: FrontDoor, context: Any, page: Any, shots: Screenshots, attacker_host: str
) -> None:
    door = front_door
    signed_in(page, context, door, EMAIL, PASSWORD)
    create_key(page, "kept")
    page.goto(door.url + "/account")
    shots.take(page, "account")
    token_name = page.get_attribute("form input[type=hidden]", "name") or "csrf"
    leaked = csrf_token(page)  # as if it had leaked: the origin check must hold on its own
    before = team_keys(door)
    mine = [k for k in before if k.get("name") == "kept"]
    assert len(mine) == 1

    targets = {
        "/create": attack_page(door.url + "/account/keys", {"name": "pwned", token_name: leaked}),
        "/revoke": attack_page(
            door.url + f"/account/keys/{mine[0]['id']}/revoke", {token_name: leaked}
        ),
        "/signout": attack_page(door.url + "/signout", {token_name: leaked}),
    }
    with second_origin(attacker_host, targets) as evil:
        for path in targets:
            page.goto(evil.url + path)
            with page.expect_navigation() as answer:
                page.click("#go")
            shots.take(page, f"refused{path}")
            assert answer.value.status == 403, (path, answer.value.status)
    assert "Origin" in door.logged() or "Sec-Fetch-Site" in door.logged()

    after = team_keys(door)
    assert [(k["id"], k.get("revoked_at")) for k in after] == [
        (k["id"], k.get("revoked_at")) for k in before
    ]
    page.goto(door.url + "/account")
    assert EMAIL in page.content()  # still signed in: the forged sign-out did nothing


def test_a_wrong_token_without_browser_marks_changes_nothing(
    front_door: FrontDoor, context: Any, page: Any
) -> None:
    door = front_door
    signed_in(page, context, door, EMAIL, PASSWORD)
    page.goto(door.url + "/account")
    token_name = page.get_attribute("form input[type=hidden]", "name") or "csrf"
    cookie = session_cookie(context)
    assert cookie is not None
    before = team_keys(door)
    for token in ("", "0" * 43, csrf_token(page)[:-2] + "AA"):
        answer = httpx.post(
            door.url + "/account/keys",
            data={"name": "pwned", token_name: token},
            cookies={SESSION_COOKIE: cookie["value"]},
        )
        assert answer.status_code == 403, (token, answer.status_code)
    assert team_keys(door) == before
