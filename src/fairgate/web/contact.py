"""``landing.contact`` as the landing page shows it: a mailto link, a web link, or text.

    alice@example.org            → <a href="mailto:alice@example.org">
    https://help.example.org/ai  → <a href="https://help.example.org/ai">
    #ai-platform on chat         → plain text
    javascript:alert(1)          → plain text (no other scheme is ever linked)

The value comes from configuration, which is not always written by whoever runs
the gateway; a ``javascript:`` href on a page served to every visitor would be a
stored XSS, and escaping the text does not make a scheme safe. So only the two
forms below become links, matched on the whole value with no leading or
trailing space or control character; everything else is text, which the
template escapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlsplit

__all__ = ["Contact", "contact_of"]

# A plain address: no spaces, quotes, angle brackets or a second @; a dotted domain.
_EMAIL = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
_URL_CHARS = re.compile(r"[!#$&-;=?-\[\]_a-z~%A-Z]+")  # RFC 3986 characters, nothing else


@dataclass(frozen=True, slots=True)
class Contact:
    """What the page shows: ``href`` is None for plain text; ``text`` is always shown escaped."""

    kind: Literal["mailto", "link", "text"]
    text: str
    href: str | None = None


def contact_of(value: str | None) -> Contact | None:
    """The contact of a configured ``landing.contact`` (None when it is not set)."""
    if value is None or not value.strip():
        return None
    if _EMAIL.fullmatch(value):
        return Contact("mailto", value, "mailto:" + quote(value, safe="@.+-_"))
    if _is_web_url(value):
        return Contact("link", value, value)
    return Contact("text", value)


def _is_web_url(value: str) -> bool:
    if not _URL_CHARS.fullmatch(value):
        return False
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    # the scheme compared exactly: "HTTPS:" or " https:" stays text, so does "https:/x"
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and value.startswith(parts.scheme + "://")
    )
