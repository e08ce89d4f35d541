"""Hostile form bodies: each gets a clear HTML page with its status, nothing else happens."""

from __future__ import annotations

import pytest

from web.conftest import SAME_ORIGIN, StartWeb, csrf_of

FORM = {"content-type": "application/x-www-form-urlencoded", **SAME_ORIGIN}


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"email=a%40example.org&password=" + b"x" * 20000, FORM, 413),
        (b"email=%ff%fe&password=xxxxxxxxxxxxxxxx", FORM, 400),  # not UTF-8
        (b"email=\xff&password=x", FORM, 400),  # raw bytes that are not ASCII
        (b"email=a&email=b&password=xxxxxxxxxxxxxx", FORM, 400),  # a field twice
        (b"&".join(b"f%d=1" % i for i in range(40)), FORM, 400),  # too many fields
        (b'{"email": "a@example.org"}', {**SAME_ORIGIN, "content-type": "application/json"}, 400),
        (b"email=a%40example.org&password=x%00yyyyyyyyyyyy", FORM, 400),  # NUL
        (b"email=a%40example.org&password=yyyyyyyyyyyyyy&x%00y=1", FORM, 400),  # NUL in a name
    ],
)
async def test_a_hostile_body_is_a_page_with_its_status(
    start_web: StartWeb, body: bytes, headers: dict[str, str], status: int
) -> None:
    web = await start_web()
    csrf = csrf_of(await web.client.get("/signup"))
    for path in ("/signup", "/signin"):
        answer = await web.client.post(
            path, content=body + b"&csrf=" + csrf.encode(), headers=headers
        )
        assert answer.status_code == status, (path, answer.text)
        assert answer.headers["content-type"].startswith("text/html")
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert await web.gateway.accounts.list() == []


async def test_a_missing_field_is_a_400_page(start_web: StartWeb) -> None:
    web = await start_web()
    csrf = csrf_of(await web.client.get("/signup"))
    answer = await web.client.post(
        "/signup", data={"csrf": csrf, "email": "a@example.org"}, headers=SAME_ORIGIN
    )
    assert answer.status_code == 400
    assert "could not be read" in answer.text


async def test_an_overlong_declared_length_is_refused_before_reading(start_web: StartWeb) -> None:
    web = await start_web()
    answer = await web.client.post(
        "/signin",
        content=b"x=1",
        headers={**FORM, "content-length": "999999999"},
    )
    assert answer.status_code == 413


async def test_a_get_only_page_refuses_other_methods_with_a_page(start_web: StartWeb) -> None:
    web = await start_web()
    answer = await web.client.delete("/account")
    assert answer.status_code == 405
    assert answer.headers["content-type"].startswith("text/html")
