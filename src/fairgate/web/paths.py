"""The paths of the client listener that are web pages, not the OpenAI API.

``ProxyApp`` sends a request here when its path is one of ``EXACT`` or starts
with one of ``PREFIXES`` (``fairgate.core.asgi.Mount``); every other path goes to
the pipeline unchanged. The check is one set lookup and one ``startswith`` per
request.
"""

from __future__ import annotations

__all__ = ["EXACT", "PREFIXES"]

EXACT = frozenset({"/", "/signup", "/signin", "/signout", "/account"})
"""The pages at a fixed path."""

PREFIXES = ("/account/", "/claim/", "/static/")
"""The pages below a fixed path (a key's action, a claim link, the stylesheet)."""
