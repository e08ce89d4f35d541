"""The issue's whole path in Chromium: sign up, be refused until an operator approves with
the CLI, sign in, create a key (shown once), call the gateway with it through the official
``openai`` SDK, see the spend on /account, sign out, and find the old cookie dead."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import openai
import pytest
from tests.e2e.browser.conftest import MODEL, FrontDoor
from tests.e2e.browser.harness import Screenshots
from tests.e2e.browser.people import (
    SECRET,
    SESSION_COOKIE,
    approve,
    session_cookie,
    sign_in,
    sign_up,
)

pytestmark = pytest.mark.slow

EMAIL = "ada@example.org"
PASSWORD = "correct horse battery staple"


def test_sign_up_approve_key_spend_sign_out(
    front_door: FrontDoor, context: Any, page: Any, shots: Screenshots
) -> None:
    door = front_door
    page.goto(door.url + "/")
    shots.take(page, "landing")
    assert "openai" in page.content()

    answer = sign_up(page, door, EMAIL, PASSWORD, shots)
    shots.take(page, "signed-up")
    assert answer.status == 200
    assert session_cookie(context) is None

    answer = sign_in(page, door, EMAIL, PASSWORD, shots)  # pending: refused like a wrong password
    shots.take(page, "refused-before-approval")
    assert answer.status in (401, 403)
    assert session_cookie(context) is None
    assert not page.url.startswith(door.url + "/account")

    approve(door, EMAIL)
    sign_in(page, door, EMAIL, PASSWORD)
    assert page.url.startswith(door.url + "/account"), page.url
    shots.take(page, "account")
    cookie = session_cookie(context)
    assert cookie is not None
    assert cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert cookie["path"] == "/" and not cookie.get("domain", "").startswith(".")
    assert EMAIL in page.content()

    secret = create_key(page, "laptop")
    shots.take(page, "key-created")
    page.goto(door.url + "/account")
    assert secret not in page.content()  # shown once
    assert page.locator("form[action$='/revoke']").count() == 1  # one key, this one

    client = openai.OpenAI(base_url=door.url + "/v1", api_key=secret, max_retries=0)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=8
    )
    assert reply.usage is not None and reply.usage.completion_tokens == 8

    requests, gpu_hours = wait_for_spend(page, door)
    shots.take(page, "spend")
    assert requests == 1 and gpu_hours > 0
    assert page.locator("svg").count() >= 1  # the chart, drawn on the server

    old = cookie["value"]
    page.click("form[action='/signout'] button")
    page.wait_for_load_state()
    shots.take(page, "signed-out")
    assert session_cookie(context) is None

    replayed = httpx.get(
        door.url + "/account", cookies={SESSION_COOKIE: old}, follow_redirects=False
    )
    assert EMAIL not in replayed.text
    assert replayed.status_code in (303, 401), replayed.status_code


def create_key(page: Any, name: str) -> str:
    """Create a key from /account's form; returns the secret the page shows (once)."""
    page.fill("form[action='/account/keys'] input[name=name]", name)
    page.click("form[action='/account/keys'] button[type=submit]")
    page.wait_for_load_state()
    found = SECRET.search(page.inner_text("body"))
    assert found, "no secret on the page after creating a key"
    return found.group(0)


MONTH = re.compile(r"requests: (\d+), GPU-hours: ([0-9]+(?:\.[0-9]+)?)")


def wait_for_spend(page: Any, door: FrontDoor, timeout: float = 15.0) -> tuple[int, float]:
    """Reload /account until this month's spend shows a request (records are written every
    second); returns (requests, GPU-hours) as the page states them."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(door.url + "/account")
        text = page.inner_text("#spend")
        found = MONTH.search(text)
        assert found, text
        if int(found.group(1)) > 0:
            return int(found.group(1)), float(found.group(2))
        assert time.monotonic() < deadline, f"no spend on /account: {text!r}"
        time.sleep(0.5)
