"""The web front door: server-rendered pages on the client listener.

    GET  /                      the landing page: address, examples, models, where keys come from
    GET  /static/style.css      the one stylesheet (no external asset, no script)

Every response carries the security headers of ``fairgate.web.headers``; the
pages answer only clients inside ``routes.web``. ``build_web`` returns the
``Mount`` that ``ProxyApp`` puts in front of the pipeline for these paths only.
"""

from __future__ import annotations

from fairgate.web.app import build_web

__all__ = ["build_web"]
