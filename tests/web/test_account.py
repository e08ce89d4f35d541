"""``/account`` over HTTP: keys created once and revoked only by their owner, spend, models."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
import sqlalchemy as sa

from fairgate.sim.process import SimProcess
from fairgate.store import tables
from fairgate.tenancy import Actor
from web.conftest import (
    SAME_ORIGIN,
    StartWeb,
    Web,
    approved_account,
    csrf_of,
    sign_in,
    sign_up,
)


async def _create_key(
    client: httpx.AsyncClient, name: str = "laptop"
) -> tuple[str, httpx.Response]:
    page = await client.get("/account")
    made = await client.post(
        "/account/keys", data={"csrf": csrf_of(page), "name": name}, headers=SAME_ORIGIN
    )
    assert made.status_code == 200, made.text
    secret = re.search(r"<code>(fg-[^<]+)</code>", made.text)
    assert secret is not None
    return secret.group(1), made


async def _revoked_at(web: Web, key_id: str) -> object:
    async with web.gateway.store.read() as conn:
        row = (
            await conn.execute(
                sa.select(tables.keys.c.revoked_at).where(tables.keys.c.id == key_id)
            )
        ).one()
    return row.revoked_at


async def test_a_new_key_is_shown_once_and_works(start_web: StartWeb) -> None:
    web = await start_web()
    client = await approved_account(web, "ada@example.org")
    secret, made = await _create_key(client)
    assert made.headers["cache-control"] == "no-store"
    answer = await client.get("/v1/models", headers={"authorization": f"Bearer {secret}"})
    assert answer.status_code == 200
    page = await client.get("/account")
    assert "laptop" in page.text
    assert secret not in page.text
    assert secret[:11] in page.text  # the prefix identifies it
    await client.aclose()


def _revoke_paths(page: httpx.Response) -> list[str]:
    return re.findall(r'action="(/account/keys/[^"]+/revoke)"', page.text)


async def test_revoking_ones_own_key_stops_it(start_web: StartWeb) -> None:
    web = await start_web()
    client = await approved_account(web, "ada@example.org")
    secret, _ = await _create_key(client)
    page = await client.get("/account")
    (path,) = _revoke_paths(page)
    auth = {"authorization": f"Bearer {secret}"}
    assert (await client.get("/v1/models", headers=auth)).status_code == 200
    done = await client.post(path, data={"csrf": csrf_of(page)}, headers=SAME_ORIGIN)
    assert done.status_code == 303
    assert await _revoked_at(web, path.split("/")[3]) is not None
    page = await client.get("/account")
    assert _revoke_paths(page) == []
    assert "revoked" in page.text
    # withdrawn access reaches the key cache within auth.change_poll_interval
    for _ in range(40):
        status = (await client.get("/v1/models", headers=auth)).status_code
        if status == 401:
            break
        await asyncio.sleep(0.1)
    assert status == 401
    await client.aclose()


async def test_another_accounts_key_id_changes_nothing(
    start_web: StartWeb, store_section: dict[str, str]
) -> None:
    web = await start_web(store=store_section)
    ada = await approved_account(web, "ada@example.org")
    eve = await approved_account(web, "eve@example.org")  # the same team
    await _create_key(ada)
    (path,) = _revoke_paths(await ada.get("/account"))
    key_id = path.split("/")[3]
    eves_page = await eve.get("/account")
    assert key_id not in eves_page.text  # not listed to her
    refused = await eve.post(path, data={"csrf": csrf_of(eves_page)}, headers=SAME_ORIGIN)
    assert refused.status_code == 404
    assert refused.headers["content-type"].startswith("text/html")
    assert await _revoked_at(web, key_id) is None  # the table, read back: unchanged
    # a key of the operator's (no owner) is not hers either
    async with web.gateway.store.read() as conn:
        others = (
            (
                await conn.execute(
                    sa.select(tables.keys.c.id).where(tables.keys.c.owner_id.is_(None))
                )
            )
            .scalars()
            .all()
        )
    for other in others:
        answer = await eve.post(
            f"/account/keys/{other}/revoke",
            data={"csrf": csrf_of(eves_page)},
            headers=SAME_ORIGIN,
        )
        assert answer.status_code == 404
        assert await _revoked_at(web, other) is None
    await ada.aclose()
    await eve.aclose()


async def test_a_team_admins_account_revokes_only_its_own_keys_on_the_pages(
    start_web: StartWeb, store_section: dict[str, str]
) -> None:
    """A team admin may revoke a teammate's key through the admin API, but the pages
    revoke one's own keys only: a teammate's key id is the same 404 as an unknown one."""
    web = await start_web(store=store_section)
    ada = await approved_account(web, "ada@example.org")
    await _create_key(ada)
    (path,) = _revoke_paths(await ada.get("/account"))
    key_id = path.split("/")[3]
    boss = web.other_client()
    await sign_up(boss, "boss@example.org")
    await web.gateway.accounts.approve(
        Actor.operator("tests"), "boss@example.org", team="t", role="team_admin"
    )
    assert (await sign_in(boss, "boss@example.org")).status_code == 303
    page = await boss.get("/account")
    refused = await boss.post(path, data={"csrf": csrf_of(page)}, headers=SAME_ORIGIN)
    revoked = await _revoked_at(web, key_id)
    await ada.aclose()
    assert refused.status_code == 404
    assert revoked is None
    # their own key they revoke, and again (already revoked: the same answer)
    await _create_key(boss)
    (own,) = _revoke_paths(await boss.get("/account"))
    for _ in range(2):
        done = await boss.post(own, data={"csrf": csrf_of(page)}, headers=SAME_ORIGIN)
        assert done.status_code == 303
    assert await _revoked_at(web, own.split("/")[3]) is not None
    await boss.aclose()


async def test_a_csrf_token_of_another_session_is_refused(start_web: StartWeb) -> None:
    web = await start_web()
    ada = await approved_account(web, "ada@example.org")
    eve = await approved_account(web, "eve@example.org")
    eves_token = csrf_of(await eve.get("/account"))
    for path in ("/account/keys", "/signout"):
        refused = await ada.post(path, data={"csrf": eves_token}, headers=SAME_ORIGIN)
        assert refused.status_code == 403
        assert "expired" in refused.text
    missing = await ada.post("/account/keys", data={"name": "x"}, headers=SAME_ORIGIN)
    assert missing.status_code == 403
    assert (await ada.get("/account")).status_code == 200  # still signed in
    assert "fg-" not in (await ada.get("/account")).text
    await ada.aclose()
    await eve.aclose()


async def test_a_key_form_from_another_site_is_refused(start_web: StartWeb) -> None:
    web = await start_web()
    ada = await approved_account(web, "ada@example.org")
    token = csrf_of(await ada.get("/account"))
    refused = await ada.post(
        "/account/keys",
        data={"csrf": token},
        headers={"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
    )
    assert refused.status_code == 403
    assert _revoke_paths(await ada.get("/account")) == []
    await ada.aclose()


async def test_the_page_shows_limits_budgets_spend_chart_and_models(start_web: StartWeb) -> None:
    web = await start_web()
    ada = await approved_account(web, "ada@example.org")
    await _create_key(ada)
    page = await ada.get("/account")
    text = page.text
    assert "requests per minute" in text
    assert "Spend this month" in text
    assert '<svg class="chart"' in text and "<script" not in text
    assert "<code>m</code>" in text  # the team's models (every model: the team names none)
    assert page.headers["cache-control"] == "no-store"
    await ada.aclose()


@pytest.mark.slow
async def test_a_call_with_a_new_key_shows_as_spend_on_the_page(start_web: StartWeb) -> None:
    with SimProcess("--model", "m", "--speed", "0") as sim:
        web = await start_web(
            [
                {
                    "name": "m",
                    "engine": "vllm",
                    "cost": {"input_per_mtok": 1000.0, "output_per_mtok": 1000.0},
                    "upstreams": [{"name": "r0", "url": sim.url}],
                }
            ]
        )
        ada = await approved_account(web, "ada@example.org")
        secret, _ = await _create_key(ada)
        answer = await ada.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
            headers={"authorization": f"Bearer {secret}"},
        )
        assert answer.status_code == 200, answer.text
        # usage records are written in batches: the page shows them once written
        for _ in range(50):
            text = (await ada.get("/account")).text
            if "requests: 1<" in text:
                break
            await asyncio.sleep(0.1)
        assert "requests: 1<" in text  # the key's row
        month = text[text.index("Spend this month") :]
        spend = re.search(r'<p id="spend">([^<]*)</p>', month)
        assert spend is not None
        assert spend.group(1).startswith("requests: 1, GPU-hours: ")
        assert not spend.group(1).endswith("GPU-hours: 0")
        assert re.search(r"<rect [^>]*height=\"1[0-9]{2}\.[0-9]\"", month)  # today's bar is drawn
        await ada.aclose()


async def test_after_the_role_is_revoked_the_page_offers_no_key_creation(
    start_web: StartWeb,
) -> None:
    """The person keeps their account but no longer holds a role in the team: creating a
    key is refused, so the page must not offer the form; the key they made stays listed."""
    web = await start_web()
    client = await approved_account(web, "ada@example.org")
    await _create_key(client)
    page = await client.get("/account")
    assert "Create a key" in page.text and 'action="/account/keys"' in page.text
    roles = web.gateway.tenancy.roles
    await roles.revoke(Actor.operator("tests"), user="ada@example.org", role="member", team="t")
    page = await client.get("/account")
    assert page.status_code == 200, page.text
    assert "laptop" in page.text
    assert "Create a key" not in page.text and 'action="/account/keys"' not in page.text
    # and the refusal itself stands
    made = await client.post(
        "/account/keys", data={"csrf": csrf_of(page), "name": "x"}, headers=SAME_ORIGIN
    )
    assert made.status_code in (403, 404), made.text  # a refusal page, not an error page
    assert "Something went wrong" not in made.text and "Create a key" not in made.text
    await client.aclose()
