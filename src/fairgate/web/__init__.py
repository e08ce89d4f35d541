"""The web front door: server-rendered pages on the client listener.

    GET  /                              the landing page (``landing``)
    GET  /signup, /signin   POST both   sign up, sign in (``signin``)
    POST /signout                       end the session at once
    GET  /account                       keys, limits, spend, budgets, models (``account``)
    POST /account/keys                  a new key, its secret shown once
    POST /account/keys/{id}/revoke      revoke one's own key
    GET  /claim/{token}   POST          a one-time key link (``claim``)
    GET  /static/style.css              the one stylesheet (no external asset, no script)

Every response carries the security headers of ``fairgate.web.headers``; the
pages answer only clients inside ``routes.web``; every POST is refused when the
browser marks it cross-site (``origin``) and needs its form's CSRF token
(``csrf`` before sign-in, the session's after). ``build_web`` returns the
``Mount`` that ``ProxyApp`` puts in front of the pipeline for these paths only.

Errors are pages (``errors.PageError``): its status, a sentence for the person,
the reason in the log.
"""

from __future__ import annotations

from fairgate.web.app import build_web

__all__ = ["build_web"]
