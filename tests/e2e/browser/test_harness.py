"""The harness itself: Debian's Chromium runs headless, a ``__Host-`` cookie (Secure) is kept
on http://localhost, and the gateway on localhost answers the official SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from tests.e2e.browser.conftest import MODEL, FrontDoor
from tests.e2e.browser.harness import Screenshots, second_origin
from tests.e2e.conftest import TEST_KEY

pytestmark = pytest.mark.slow

COOKIE = "__Host-probe=1; Secure; HttpOnly; SameSite=Lax; Path=/"


def test_chromium_is_debians(chromium: Any) -> None:
    assert chromium.browser_type.name == "chromium"
    assert chromium.version.split(".")[0].isdigit()


def test_host_cookie_is_kept_on_localhost(context: Any, page: Any, shots: Screenshots) -> None:
    pages = {"/set": "<p id=set>set</p>", "/check": "<p id=check>check</p>"}
    with second_origin("localhost", pages, headers={"/set": {"set-cookie": COOKIE}}) as site:
        page.goto(site.url + "/set")
        shots.take(page, "set")
        page.goto(site.url + "/check")
        assert page.inner_text("#check") == "check"
    kept = {c["name"]: c for c in context.cookies()}
    assert kept["__Host-probe"]["secure"] and kept["__Host-probe"]["httpOnly"]
    assert site.seen[-1][0] == "/check"
    assert "__Host-probe=1" in site.seen[-1][1].get("cookie", "")


def test_gateway_answers_on_localhost(front_door: FrontDoor) -> None:
    client = openai.OpenAI(base_url=front_door.url + "/v1", api_key=TEST_KEY, max_retries=0)
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 3
