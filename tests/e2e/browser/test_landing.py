"""The landing page in Chromium: it loads nothing from another origin, runs no script, sends
its security headers, shows the base URL and the SDK example, and a hostile
``landing.contact`` (``javascript:``) is shown as text that does nothing when clicked."""

from __future__ import annotations

from typing import Any

import pytest
from tests.e2e.browser.conftest import MODEL, StartFrontDoor
from tests.e2e.browser.harness import Screenshots

pytestmark = pytest.mark.slow

HOSTILE = "javascript:alert(document.cookie)"


@pytest.mark.parametrize(
    ("contact", "href"),
    [("keys@example.org", "mailto:keys@example.org"), (HOSTILE, None)],
    ids=["mailto", "javascript"],
)
def test_landing_page(
    start_front_door: StartFrontDoor,
    page: Any,
    shots: Screenshots,
    contact: str,
    href: str | None,
) -> None:
    door = start_front_door("--speed", "0", landing={"contact": contact})
    requested: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    answer = page.goto(door.url + "/")
    shots.take(page, "landing")
    assert answer is not None and answer.status == 200
    headers = answer.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert "referrer-policy" in headers
    assert all(url.startswith(door.url + "/") for url in requested), requested

    body = page.inner_text("body")
    assert f"{door.url}/v1" in body
    assert "from openai import OpenAI" in body and MODEL in body

    links = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    assert not [link for link in links if not link.startswith(("/", "mailto:", "http"))], links
    if href is not None:
        assert page.get_attribute(f"a[href='{href}']", "href") == href
    else:
        assert HOSTILE in body  # shown, escaped, never linked
        page.click(f"text={HOSTILE}")
        page.wait_for_timeout(200)
        shots.take(page, "after-click")
        assert dialogs == []
        assert page.url == door.url + "/"
