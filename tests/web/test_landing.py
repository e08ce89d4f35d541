"""The landing page over HTTP: address, examples, models, and ``landing.contact`` linked safely."""

from __future__ import annotations

import re

import pytest

from web.conftest import StartWeb


async def test_the_landing_page_names_the_address_the_sdk_and_the_models(
    start_web: StartWeb,
) -> None:
    web = await start_web()
    page = await web.client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    text = page.text
    assert "https://gateway.test/v1" in text
    assert "from openai import OpenAI" in text
    assert "curl https://gateway.test/v1/chat/completions" in text
    assert "<code>m</code>" in text and "m-alias" in text
    assert "one-time link" in text


async def test_unconfigured_contact_still_says_what_to_do(start_web: StartWeb) -> None:
    web = await start_web()
    text = (await web.client.get("/")).text
    assert "No contact is configured" in text
    assert "mailto:" not in text


async def test_an_email_contact_becomes_a_mailto_link(start_web: StartWeb) -> None:
    web = await start_web(landing={"contact": "ai-help@example.org"})
    text = (await web.client.get("/")).text
    assert '<a href="mailto:ai-help@example.org"' in text


async def test_an_https_contact_becomes_a_link(start_web: StartWeb) -> None:
    web = await start_web(landing={"contact": "https://help.example.org/ai?x=1&y=2"})
    text = (await web.client.get("/")).text
    assert '<a href="https://help.example.org/ai?x=1&amp;y=2"' in text


@pytest.mark.parametrize(
    "value",
    [
        "javascript:alert(1)",
        "JavaScript:alert(document.cookie)",
        "data:text/html,<script>alert(1)</script>",
        "DATA:text/html;base64,PHNjcmlwdD4=",
        "vbscript:msgbox(1)",
        "VBScript:msgbox(1)",
        "HTTPS://help.example.org",
        'https://help.example.org" onmouseover="alert(1)',
        "<script>alert(1)</script>",
        "ftp://files.example.org",
        "mailto:x@example.org",
    ],
)
async def test_any_other_contact_is_escaped_plain_text(start_web: StartWeb, value: str) -> None:
    web = await start_web(landing={"contact": value})
    text = (await web.client.get("/")).text
    section = text[text.index("Getting a key") :]
    # no link at all in the contact paragraph, and no markup from the value
    contact = section[section.index("To ask for a key") :]
    contact = contact[: contact.index("</p>")]
    assert "<a " not in contact
    assert "<script>" not in text
    assert 'class="contact"' in contact


async def test_every_page_carries_the_security_headers(start_web: StartWeb) -> None:
    web = await start_web()
    for path in ("/", "/static/style.css", "/claim/nothing-here", "/account/nope"):
        answer = await web.client.get(path)
        csp = answer.headers["content-security-policy"]
        assert "default-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "form-action 'self'" in csp
        assert "base-uri 'none'" in csp
        assert "script-src" not in csp  # no script allowed, not even a hashed one
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] in ("same-origin", "no-referrer")


async def test_the_landing_page_has_no_script_and_no_external_asset(start_web: StartWeb) -> None:
    web = await start_web(landing={"contact": "https://help.example.org"})
    text = (await web.client.get("/")).text
    assert "<script" not in text
    # every src/href that loads something is same-origin (links out are plain anchors)
    for attr in re.findall(r'<(?:link|img|script|iframe)[^>]*(?:src|href)="([^"]+)"', text):
        assert attr.startswith("/")


async def test_the_stylesheet_is_served_as_css(start_web: StartWeb) -> None:
    web = await start_web()
    answer = await web.client.get("/static/style.css")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/css")
    assert "max-age" in answer.headers["cache-control"]


async def test_an_unknown_web_path_is_a_404_page(start_web: StartWeb) -> None:
    web = await start_web()
    for path in ("/claim/", "/account/", "/static/", "/account/keys"):
        answer = await web.client.get(path)
        assert answer.status_code in (404, 405), path
        assert "location" not in answer.headers
    answer = await web.client.get("/claim/")
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("text/html")
    assert "There is no page at this address" in answer.text


async def test_api_paths_still_reach_the_pipeline(start_web: StartWeb) -> None:
    web = await start_web()
    answer = await web.client.get("/v1/models")
    assert answer.status_code == 401
    assert answer.json()["error"]["type"]
    answer = await web.client.get("/accountx")
    assert answer.headers["content-type"].startswith("application/json")


async def test_web_disabled_leaves_every_path_to_the_api(start_web: StartWeb) -> None:
    web = await start_web(web={"enabled": False})
    answer = await web.client.get("/")
    assert answer.headers["content-type"].startswith("application/json")
    assert "content-security-policy" not in answer.headers


async def test_routes_web_refuses_a_client_outside_its_networks(start_web: StartWeb) -> None:
    web = await start_web(routes={"web": {"allow": ["10.0.0.0/8"]}})
    refused = await web.client.get("/")  # from 127.0.0.1
    assert refused.status_code == 403
    assert refused.headers["content-type"].startswith("text/html")
    assert refused.headers["x-content-type-options"] == "nosniff"
    async with web.other_client("10.9.9.9") as inside:
        assert (await inside.get("/")).status_code == 200
    # the API is its own class: the web rule does not touch it
    assert (await web.client.get("/v1/models")).status_code == 401


async def test_public_url_is_the_address_the_page_shows(start_web: StartWeb) -> None:
    web = await start_web(public_url="https://ai.example.org/gw")
    text = (await web.client.get("/")).text
    assert "https://ai.example.org/gw/v1" in text
    assert "gateway.test" not in text
