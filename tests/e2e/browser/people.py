"""A person's steps through the front door, as a browser takes them, and the operator's.

sign_up(page, door, EMAIL, PASSWORD)
approve(door, EMAIL)                       # fairgate accounts approve, a child process
sign_in(page, door, EMAIL, PASSWORD)       # lands on /account
"""

from __future__ import annotations

import re
from typing import Any

from tests.e2e.browser.conftest import FrontDoor
from tests.e2e.browser.harness import Screenshots, fairgate_cli

SESSION_COOKIE = "__Host-fairgate-session"
SECRET = re.compile(r"\bfg-[A-Za-z0-9_-]{20,}")
"""What a key's secret looks like on a page."""


def sign_up(
    page: Any, door: FrontDoor, email: str, password: str, shots: Screenshots | None = None
) -> Any:
    """Fill and send the sign-up form (saving the empty form to ``shots``);
    returns the answer to the form's POST."""
    return _send_form(page, door, "signup", email, password, shots)


def sign_in(
    page: Any, door: FrontDoor, email: str, password: str, shots: Screenshots | None = None
) -> Any:
    """Fill and send the sign-in form (saving the empty form to ``shots``);
    returns the answer to the form's POST."""
    return _send_form(page, door, "signin", email, password, shots)


def _send_form(
    page: Any, door: FrontDoor, form: str, email: str, password: str, shots: Screenshots | None
) -> Any:
    page.goto(f"{door.url}/{form}")
    if shots is not None:
        shots.take(page, f"{form}-form")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    with page.expect_navigation() as answer:
        page.click("form button[type=submit]")
    return answer.value


def approve(door: FrontDoor, email: str, team: str = "t") -> str:
    """``fairgate accounts approve EMAIL --team TEAM`` against the gateway's store."""
    done = fairgate_cli(door.config, "accounts", "approve", email, "--team", team)
    assert done.returncode == 0, done.stderr
    return done.stdout


def session_cookie(context: Any) -> dict[str, Any] | None:
    """The session cookie the browser holds, or None."""
    return next((c for c in context.cookies() if c["name"] == SESSION_COOKIE), None)


def signed_in(page: Any, context: Any, door: FrontDoor, email: str, password: str) -> None:
    """Sign up, get approved and sign in: the browser ends on /account with a session."""
    sign_up(page, door, email, password)
    approve(door, email)
    sign_in(page, door, email, password)
    assert page.url.startswith(door.url + "/account"), page.url
    assert session_cookie(context) is not None
