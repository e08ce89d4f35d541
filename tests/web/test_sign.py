"""Sign-up, sign-in and sign-out over HTTP: what a person and an attacker each see."""

from __future__ import annotations

import asyncio

import httpx

from fairgate.accounts import COOKIE
from fairgate.tenancy.actor import Actor
from web.conftest import (
    BASE,
    PASSWORD,
    SAME_ORIGIN,
    StartWeb,
    approved_account,
    client_of,
    csrf_of,
    post_form,
    sign_in,
    sign_up,
)

OPERATOR = Actor.operator("tests")


async def test_sign_up_answers_alike_for_a_new_and_a_known_address(
    start_web: StartWeb, store_section: dict[str, str]
) -> None:
    web = await start_web(store=store_section)
    first = await sign_up(web.client, "ada@example.org")
    again = await sign_up(web.client, "ada@example.org", "another password entirely")
    other = await sign_up(web.client, "bob@example.org")
    assert first.status_code == again.status_code == other.status_code == 200
    assert first.content == again.content == other.content
    assert "set-cookie" not in first.headers or COOKIE not in first.headers["set-cookie"]
    pending = await web.gateway.accounts.list(pending=True)
    assert sorted(a.email for a in pending) == ["ada@example.org", "bob@example.org"]


async def test_sign_up_refuses_a_short_password_and_a_bad_address_as_pages(
    start_web: StartWeb,
) -> None:
    web = await start_web()
    short = await sign_up(web.client, "ada@example.org", "too short")
    assert short.status_code == 400
    assert "between 12 and 1024" in short.text
    bad = await sign_up(web.client, "not an address")
    assert bad.status_code == 400
    assert "not an e-mail address" in bad.text
    assert await web.gateway.accounts.list() == []


async def test_sign_up_floods_from_one_network_get_429_alike_for_new_and_known_addresses(
    start_web: StartWeb,
) -> None:
    web = await start_web(accounts={"signups_per_network": 3})
    answers = [await sign_up(web.client, f"p{i}@example.org") for i in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    known = await sign_up(web.client, "p0@example.org")
    new = await sign_up(web.client, "p9@example.org")
    assert known.status_code == new.status_code == 429
    assert known.content == new.content
    assert int(new.headers["retry-after"]) >= 1
    assert sorted(a.email for a in await web.gateway.accounts.list()) == [
        "p0@example.org",
        "p1@example.org",
        "p2@example.org",
    ]
    # another network is not held back by the first one's flood
    async with web.other_client() as other:
        assert (await sign_up(other, "q@example.org")).status_code == 200


async def test_sign_in_refuses_alike_until_approval(start_web: StartWeb) -> None:
    web = await start_web()
    await sign_up(web.client, "ada@example.org")
    answers = [
        await sign_in(web.client, "ada@example.org"),  # pending
        await sign_in(web.client, "ada@example.org", "wrong password here"),
        await sign_in(web.client, "nobody@example.org"),  # no account
    ]
    for answer in answers:
        assert answer.status_code == 401
        assert "Wrong e-mail address or password" in answer.text
        assert COOKIE not in answer.headers.get("set-cookie", "")
    # one page for all three: the same bytes once the echoed address is taken out
    bodies = {
        a.text.replace("ada@example.org", "").replace("nobody@example.org", "") for a in answers
    }
    assert len(bodies) == 1


async def test_sign_in_sets_the_host_cookie_and_opens_the_account(start_web: StartWeb) -> None:
    web = await start_web()
    await sign_up(web.client, "ada@example.org")
    await web.gateway.accounts.approve(OPERATOR, "ada@example.org", team="t")
    signed = await sign_in(web.client, "ada@example.org")
    assert signed.status_code == 303
    assert signed.headers["location"] == "/account"
    cookie = [c for c in signed.headers.get_list("set-cookie") if c.startswith(COOKIE + "=")]
    assert len(cookie) == 1
    attributes = {part.strip().lower() for part in cookie[0].split(";")}
    assert {"secure", "httponly", "samesite=lax", "path=/"} <= attributes
    assert not any(a.startswith("domain") for a in attributes)
    page = await web.client.get("/account")
    assert page.status_code == 200
    assert "ada@example.org" in page.text


async def test_signed_out_the_account_page_sends_to_sign_in(start_web: StartWeb) -> None:
    web = await start_web()
    answer = await web.client.get("/account")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/signin"


async def test_sign_out_kills_the_old_cookie_at_once(
    start_web: StartWeb, store_section: dict[str, str]
) -> None:
    web = await start_web(store=store_section)
    client = await approved_account(web, "ada@example.org")
    old = client.cookies[COOKIE]
    page = await client.get("/account")
    out = await client.post("/signout", data={"csrf": csrf_of(page)}, headers=SAME_ORIGIN)
    assert out.status_code == 303
    assert COOKIE in out.headers["set-cookie"]
    async with client_of(web.gateway) as thief:
        thief.cookies.set(COOKIE, old, domain="gateway.test")
        assert (await thief.get("/account")).status_code == 303
        refused = await thief.post(
            "/account/keys", data={"csrf": csrf_of(page)}, headers=SAME_ORIGIN
        )
        assert refused.status_code == 403
        assert "not signed in" in refused.text
    await client.aclose()


async def test_sign_in_rotates_the_session(start_web: StartWeb) -> None:
    web = await start_web()
    client = await approved_account(web, "ada@example.org")
    first = client.cookies[COOKIE]
    await sign_in(client, "ada@example.org")
    second = client.cookies[COOKIE]
    assert first != second
    assert await web.gateway.sessions.resolve(first) is None
    assert await web.gateway.sessions.resolve(second) is not None
    await client.aclose()


async def test_a_suspended_account_is_signed_out_on_its_next_request(
    start_web: StartWeb, store_section: dict[str, str]
) -> None:
    web = await start_web(store=store_section)
    client = await approved_account(web, "ada@example.org")
    assert (await client.get("/account")).status_code == 200
    await web.gateway.accounts.suspend(OPERATOR, "ada@example.org")
    assert (await client.get("/account")).status_code == 303
    again = await sign_in(client, "ada@example.org")
    assert again.status_code == 401
    await client.aclose()


async def test_sign_in_from_another_site_is_refused(start_web: StartWeb) -> None:
    web = await start_web()
    await sign_up(web.client, "ada@example.org")
    await web.gateway.accounts.approve(OPERATOR, "ada@example.org", team="t")
    page = await web.client.get("/signin")
    for headers in (
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"origin": "https://evil.example"},
        {"origin": "null"},
        {"origin": "http://gateway.test"},  # the same host, not the same origin
    ):
        refused = await web.client.post(
            "/signin",
            data={"csrf": csrf_of(page), "email": "ada@example.org", "password": PASSWORD},
            headers=headers,
        )
        assert refused.status_code == 403
        assert COOKIE not in refused.headers.get("set-cookie", "")
        assert refused.headers["content-type"].startswith("text/html")


async def test_sign_in_without_the_browsers_form_token_is_refused(start_web: StartWeb) -> None:
    web = await start_web()
    await sign_up(web.client, "ada@example.org")
    await web.gateway.accounts.approve(OPERATOR, "ada@example.org", team="t")
    page = await web.client.get("/signin")
    async with web.other_client() as other:  # a forged post: someone else's token, no cookie
        refused = await other.post(
            "/signin",
            data={"csrf": csrf_of(page), "email": "ada@example.org", "password": PASSWORD},
        )
    assert refused.status_code == 403
    assert COOKIE not in refused.headers.get("set-cookie", "")


async def test_too_many_guesses_is_a_429_page_with_retry_after(start_web: StartWeb) -> None:
    web = await start_web(accounts={"guesses_per_address": 2})
    await sign_up(web.client, "ada@example.org")
    await web.gateway.accounts.approve(OPERATOR, "ada@example.org", team="t")
    for _ in range(2):
        assert (await sign_in(web.client, "ada@example.org", "wrong password!")).status_code == 401
    limited = await sign_in(web.client, "ada@example.org")  # even the right password waits
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.headers["content-type"].startswith("text/html")
    assert "Too many sign-in attempts" in limited.text


async def test_a_full_verifier_is_a_503_page(start_web: StartWeb) -> None:
    web = await start_web(accounts={"verify_threads": 1, "verify_queue": 0})
    await sign_up(web.client, "ada@example.org")
    page = await web.client.get("/signin")
    csrf = csrf_of(page)

    async def attempt() -> httpx.Response:
        return await web.client.post(
            "/signin",
            data={"csrf": csrf, "email": "ada@example.org", "password": "wrong password!"},
            headers=SAME_ORIGIN,
        )

    answers = await asyncio.gather(*(attempt() for _ in range(8)))
    busy = [a for a in answers if a.status_code == 503]
    assert busy, [a.status_code for a in answers]
    assert all(a.headers["retry-after"] == "1" for a in busy)
    assert "busy" in busy[0].text


async def test_behind_a_tls_proxy_the_forms_work_and_the_cookie_is_secure(
    start_web: StartWeb,
) -> None:
    web = await start_web(trusted_proxies=["127.0.0.1/32"])
    transport = httpx.ASGITransport(app=web.gateway.proxy_app, client=("127.0.0.1", 40000))  # type: ignore[arg-type]
    # the proxy speaks plain HTTP to the gateway; the browser spoke HTTPS to the proxy
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as proxy:
        forwarded = {"x-forwarded-proto": "https", "x-forwarded-for": "192.0.2.7"}
        page = await proxy.get("/signup", headers=forwarded)
        csrf = page.cookies.get("__Host-fairgate-form")
        assert csrf is not None and "secure" in page.headers["set-cookie"].lower()
        await web.gateway.accounts.sign_up("ada@example.org", PASSWORD)
        await web.gateway.accounts.approve(OPERATOR, "ada@example.org", team="t")
        signed = await proxy.post(
            "/signin",
            data={"csrf": csrf, "email": "ada@example.org", "password": PASSWORD},
            headers={
                **forwarded,
                "origin": "https://gateway.test",
                "cookie": f"__Host-fairgate-form={csrf}",
            },
        )
        assert signed.status_code == 303, signed.text
        assert "secure" in signed.headers["set-cookie"].lower()
        # the landing page names the address the browser used
        assert f"{BASE}/v1" in (await proxy.get("/", headers=forwarded)).text


async def test_sign_up_form_carries_no_session(start_web: StartWeb) -> None:
    web = await start_web()
    page = await post_form(
        web.client, "/signup", "/signup", email="x@example.org", password=PASSWORD
    )
    assert page.status_code == 200
    assert COOKIE not in web.client.cookies


async def test_sign_out_ends_a_dashboard_session_its_cookie_names(start_web: StartWeb) -> None:
    # the dashboard's admin sessions share the cookie's name: the front door's sign-out
    # deleted such a cookie in the browser but left its session open in the store
    web = await start_web()
    admin = await web.gateway.sessions.open_admin("operator:tests", None)
    assert await web.gateway.sessions.resolve(admin.cookie_value) is not None
    async with client_of(web.gateway) as browser:
        browser.cookies.set(COOKIE, admin.cookie_value, domain="gateway.test")
        out = await browser.post("/signout", data={"csrf": "x"}, headers=SAME_ORIGIN)
    assert out.status_code == 303
    assert await web.gateway.sessions.resolve(admin.cookie_value) is None
