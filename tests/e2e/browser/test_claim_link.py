"""A claim link made with ``fairgate keys create --claim``, opened in Chromium: the page
shows a button and consumes nothing (opening it twice changes nothing); the button reveals
a working key once; a second person opening the link then sees the generic page, byte for
byte the page of a link that never existed."""

from __future__ import annotations

import re
import secrets
from typing import Any

import httpx
import openai
import pytest
from tests.e2e.browser.conftest import MODEL, FrontDoor
from tests.e2e.browser.harness import Screenshots, fairgate_cli
from tests.e2e.browser.people import SECRET

pytestmark = pytest.mark.slow

LINK = re.compile(r"https?://\S+?(/claim/[A-Za-z0-9_-]+)")


def make_link(door: FrontDoor) -> str:
    """``fairgate keys create --team t --claim``: the link's path (the secret is not printed)."""
    made = fairgate_cli(door.config, "keys", "create", "--team", "t", "--claim")
    assert made.returncode == 0, made.stderr
    found = LINK.search(made.stdout)
    assert found, made.stdout
    assert not SECRET.search(made.stdout.replace(found.group(0), ""))  # no secret printed
    assert found.group(0).startswith(door.url)  # public_url is the base
    return found.group(1)


def test_a_claim_link_opened_twice(
    front_door: FrontDoor, chromium: Any, page: Any, shots: Screenshots
) -> None:
    door = front_door
    path = make_link(door)

    first = page.goto(door.url + path)
    shots.take(page, "claim-button")
    assert first is not None and first.status == 200
    assert first.headers["cache-control"] == "no-store"
    assert first.headers["referrer-policy"] == "no-referrer"
    assert "noindex" in first.headers["x-robots-tag"]
    assert not SECRET.search(page.inner_text("body"))
    page.goto(door.url + path)  # an unfurler or a second look: still unclaimed
    shots.take(page, "claim-button-again")
    with page.expect_navigation():
        page.click("form button[type=submit]")
    shots.take(page, "claimed")
    found = SECRET.search(page.inner_text("body"))
    assert found, door.logged()[-3000:]
    secret = found.group(0)

    client = openai.OpenAI(base_url=door.url + "/v1", api_key=secret, max_retries=0)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.usage is not None

    other = chromium.new_context()  # a second person with the same link
    try:
        second = other.new_page()
        again = second.goto(door.url + path)
        shots.take(second, "second-person")
        assert again is not None
        assert not SECRET.search(second.inner_text("body"))
        burned = httpx.get(door.url + path)
        never = httpx.get(door.url + "/claim/" + secrets.token_urlsafe(32))
        assert burned.status_code == never.status_code
        assert burned.content == never.content
        posted = httpx.post(door.url + path, headers={"origin": door.url})
        assert not SECRET.search(posted.text)
    finally:
        other.close()
