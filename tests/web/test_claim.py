"""``/claim/{token}`` over HTTP: GET consumes nothing, POST reveals once, dead links look alike."""

from __future__ import annotations

import asyncio
import re

import httpx
import sqlalchemy as sa

from fairgate.store import tables
from fairgate.tenancy import Tenancy
from fairgate.tenancy.actor import Actor
from web.conftest import BASE, StartWeb, Web

NEVER_VALID = "A" * 43


async def _link(web: Web) -> str:
    """A new claim link's token (a Tenancy over the gateway's own store, with public_url)."""
    tenancy = Tenancy(web.gateway.store, public_url=BASE)
    made = await tenancy.claims.create(Actor.operator("tests"), team="t")
    return made.token


def _csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


async def _press(client: httpx.AsyncClient, token: str, csrf: str | None = None) -> httpx.Response:
    """What a browser does: open the link, press the button (with ``csrf``: the form token
    this browser got from an earlier page, for a link whose page has no button)."""
    if csrf is None:
        csrf = _csrf(await client.get(f"/claim/{token}"))
    return await client.post(
        f"/claim/{token}",
        data={"csrf": csrf},
        headers={"origin": BASE, "sec-fetch-site": "same-origin"},
    )


def _claim_headers(answer: httpx.Response) -> None:
    assert answer.headers["cache-control"] == "no-store"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert "noindex" in answer.headers["x-robots-tag"]


async def test_get_shows_a_button_and_consumes_nothing(start_web: StartWeb) -> None:
    web = await start_web()
    token = await _link(web)
    for _ in range(3):  # an unfurler, a mail scanner, the person
        page = await web.client.get(f"/claim/{token}")
        assert page.status_code == 200
        assert "<button" in page.text and "fg-" not in page.text
        _claim_headers(page)
    assert await web.gateway.tenancy.claims.peek(token)


async def test_post_reveals_the_key_once_and_it_works(start_web: StartWeb) -> None:
    web = await start_web()
    token = await _link(web)
    csrf = _csrf(await web.client.get(f"/claim/{token}"))
    shown = await _press(web.client, token, csrf)
    assert shown.status_code == 200
    _claim_headers(shown)
    secret = re.search(r"<code>(fg-[^<]+)</code>", shown.text)
    assert secret is not None
    models = await web.client.get(
        "/v1/models", headers={"authorization": f"Bearer {secret.group(1)}"}
    )
    assert models.status_code == 200
    again = await _press(web.client, token, csrf)
    assert again.status_code == 404
    assert secret.group(1) not in again.text


async def test_used_expired_and_never_valid_links_render_byte_identically(
    start_web: StartWeb,
) -> None:
    web = await start_web()
    used, expired, spare = await _link(web), await _link(web), await _link(web)
    csrf = _csrf(await web.client.get(f"/claim/{spare}"))  # this browser's form token
    await _press(web.client, used)
    async with web.gateway.store.write() as conn:
        await conn.execute(
            sa.update(tables.claim_links)
            .where(tables.claim_links.c.claimed_at.is_(None))
            .values(expires_at=sa.func.now())
        )
    answers = []
    for token in (used, expired, spare, NEVER_VALID, "short", "x" * 400, "é" * 43, "%00" * 15):
        answers.append(await web.client.get(f"/claim/{token}"))
        answers.append(await _press(web.client, token, csrf))
    for answer in answers:
        assert answer.status_code == 404
        _claim_headers(answer)
        assert "set-cookie" not in answer.headers
    assert len({a.content for a in answers}) == 1
    assert "This link does not open a key" in answers[0].text


async def test_a_post_from_another_site_is_refused_and_burns_nothing(start_web: StartWeb) -> None:
    web = await start_web()
    token = await _link(web)
    page = await web.client.get(f"/claim/{token}")
    for headers in (
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "https://evil.example"},
        {"origin": "null"},
    ):
        refused = await web.client.post(
            f"/claim/{token}", data={"csrf": _csrf(page)}, headers=headers
        )
        assert refused.status_code == 403
        assert "fg-" not in refused.text
        _claim_headers(refused)
    assert await web.gateway.tenancy.claims.peek(token)


async def test_a_post_without_the_browsers_form_token_burns_nothing(start_web: StartWeb) -> None:
    web = await start_web()
    token = await _link(web)
    page = await web.client.get(f"/claim/{token}")
    async with web.other_client() as other:  # a token from another browser, no cookie
        refused = await other.post(f"/claim/{token}", data={"csrf": _csrf(page)})
    assert refused.status_code == 403
    assert (await web.client.post(f"/claim/{token}", data={"x": "1"})).status_code == 403
    assert (await web.client.post(f"/claim/{token}")).status_code == 400  # no form at all
    assert (await web.client.post(f"/claim/{token}", data={"csrf": "x" * 43})).status_code == 403
    assert await web.gateway.tenancy.claims.peek(token)


async def test_two_people_pressing_at_once_get_one_key(start_web: StartWeb) -> None:
    web = await start_web()
    token = await _link(web)
    clients = [web.other_client(f"10.0.0.{i}") for i in range(1, 7)]
    try:
        answers = await asyncio.gather(*(_press(c, token) for c in clients))
    finally:
        for client in clients:
            await client.aclose()
    assert sorted(a.status_code for a in answers) == [200] + [404] * 5


async def test_chromiums_null_origin_from_the_no_referrer_page_claims(start_web: StartWeb) -> None:
    # Chromium sends ``Origin: null`` for a form posted from a page under
    # Referrer-Policy: no-referrer (the claim page's); Sec-Fetch-Site says where it came from.
    web = await start_web()
    token = await _link(web)
    page = await web.client.get(f"/claim/{token}")
    claimed = await web.client.post(
        f"/claim/{token}",
        data={"csrf": _csrf(page)},
        headers={"origin": "null", "sec-fetch-site": "same-origin"},
    )
    assert claimed.status_code == 200
    assert "fg-" in claimed.text
