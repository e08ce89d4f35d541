"""``landing.contact`` → link or text: only a plain address and an http(s) URL are ever linked."""

from __future__ import annotations

import pytest

from fairgate.web.contact import contact_of


def test_an_address_is_a_mailto_link() -> None:
    contact = contact_of("ai-help+keys@example.org")
    assert contact is not None
    assert contact.kind == "mailto"
    assert contact.href == "mailto:ai-help+keys@example.org"


@pytest.mark.parametrize("url", ["https://help.example.org/ai", "http://10.0.0.1:8080/x?a=1#b"])
def test_an_http_url_is_a_link(url: str) -> None:
    contact = contact_of(url)
    assert contact is not None
    assert (contact.kind, contact.href) == ("link", url)


@pytest.mark.parametrize(
    "value",
    [
        "javascript:alert(1)",
        "JAVASCRIPT:alert(1)",
        "JavaScript:alert(1)",
        " javascript:alert(1)",
        "\tjavascript:alert(1)",
        "\njavascript:alert(1)",
        "\x01javascript:alert(1)",
        "java\tscript:alert(1)",
        "java\nscript:alert(1)",
        "javascript://example.org/%0aalert(1)",
        "data:text/html,<script>alert(1)</script>",
        "Data:text/html;base64,PHNjcmlwdD4=",
        " data:text/html,x",
        "vbscript:msgbox(1)",
        "VBScript:msgbox(1)",
        " vbscript:msgbox(1)",
        " https://help.example.org",
        "https://help.example.org ",
        "HTTPS://help.example.org",
        "https:/help.example.org",
        "https:help.example.org",
        "https://",
        'https://x.example.org/"onmouseover="alert(1)',
        "https://x.example.org/<script>",
        "//evil.example.org",
        "mailto:someone@example.org",
        "someone@example.org?subject=x",
        "someone@localhost",
        '"a b"@example.org',
        "#ai-platform on chat",
        "ask Dana in room 4.12",
    ],
)
def test_anything_else_is_text(value: str) -> None:
    contact = contact_of(value)
    assert contact is not None
    assert contact.kind == "text"
    assert contact.href is None
    assert contact.text == value


@pytest.mark.parametrize("value", [None, "", "   "])
def test_no_contact(value: str | None) -> None:
    assert contact_of(value) is None
