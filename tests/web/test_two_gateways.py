"""Two gateways on one PostgreSQL database and one Redis: the web front door's shared
state holds across them as it does on one (docs/scaling.md's state table).

A load balancer sends a browser's requests to either gateway; each of these tests
sends one person's steps to both and checks that nothing is granted once per gateway:
sign-in guesses are counted in Redis, sessions and claim links live in the store.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from fairgate.accounts import COOKIE
from fairgate.tenancy import Tenancy
from fairgate.tenancy.actor import Actor
from web.conftest import BASE, SAME_ORIGIN, StartWeb, Web, approved_account, client_of, sign_in

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

OPERATOR = Actor.operator("tests")


async def _pair(
    start_web: StartWeb, pg_database: str, state: dict[str, Any], **sections: Any
) -> tuple[Web, Web]:
    """Two gateways on one store and one state prefix."""
    store = {"url": pg_database}
    first = await start_web(store=store, state=state, **sections)
    second = await start_web(store=store, state=state, **sections)
    return first, second


def _csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text[:2000]
    return found.group(1)


async def test_sign_in_guesses_are_counted_once_for_both_gateways(
    start_web: StartWeb, pg_database: str, redis_state: dict[str, Any]
) -> None:
    first, second = await _pair(
        start_web, pg_database, redis_state, accounts={"guesses_per_address": 2}
    )
    ada = await approved_account(first, "ada@example.org")
    await ada.aclose()
    # an attacker from one address alternates between the gateways
    async with (
        client_of(first.gateway, "10.1.1.1") as one,
        client_of(second.gateway, "10.1.1.1") as two,
    ):
        assert (await sign_in(one, "ada@example.org", "wrong password!")).status_code == 401
        assert (await sign_in(two, "ada@example.org", "wrong password!")).status_code == 401
        # two guesses in all: the third waits on either gateway, even with the right password
        for client in (one, two):
            limited = await sign_in(client, "ada@example.org")
            assert limited.status_code == 429, limited.text[:500]


async def test_a_session_opened_on_one_gateway_is_signed_out_on_the_other(
    start_web: StartWeb, pg_database: str, redis_state: dict[str, Any]
) -> None:
    first, second = await _pair(start_web, pg_database, redis_state)
    ada = await approved_account(first, "ada@example.org")
    cookie = ada.cookies[COOKIE]
    async with client_of(second.gateway) as there:
        there.cookies.set(COOKIE, cookie, domain="gateway.test")
        page = await there.get("/account")
        assert page.status_code == 200  # the session is the store's, not the first's
        out = await there.post("/signout", data={"csrf": _csrf(page)}, headers=SAME_ORIGIN)
        assert out.status_code == 303
    # signed out through the second: the first refuses the cookie at once
    assert (await ada.get("/account")).status_code == 303
    await ada.aclose()


async def test_a_claim_link_reveals_its_key_once_across_both_gateways(
    start_web: StartWeb, pg_database: str, redis_state: dict[str, Any]
) -> None:
    first, second = await _pair(start_web, pg_database, redis_state)
    made = await Tenancy(first.gateway.store, public_url=BASE).claims.create(OPERATOR, team="t")
    pages = []
    for web in (first, second):  # two browsers opened the link, one on each gateway
        client = client_of(web.gateway)
        pages.append((client, _csrf(await client.get(f"/claim/{made.token}"))))
    answers = []
    for client, csrf in pages:
        answer = await client.post(f"/claim/{made.token}", data={"csrf": csrf}, headers=SAME_ORIGIN)
        answers.append((answer.status_code, re.search(r"<code>(fg-[^<]+)</code>", answer.text)))
        await client.aclose()
    (status, secret), (again, none) = answers
    assert status == 200 and secret is not None
    assert again == 404 and none is None  # the second gateway burns nothing twice
    async with client_of(second.gateway) as caller:
        models = await caller.get(
            "/v1/models", headers={"authorization": f"Bearer {secret.group(1)}"}
        )
    assert models.status_code == 200
