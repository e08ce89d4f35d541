"""The dashboard's HTML: Jinja2 templates (autoescaped) and the headers every page carries.

    pages = Pages()
    return pages.render("dashboard.html", status=200, view=view, ...)

The page's one script and one style sheet are inlined from ``static/`` and
allowed by their SHA-256 in the Content-Security-Policy, so no other script or
style can run (``default-src 'none'``), nothing loads from elsewhere, and the
page cannot be framed. Every answer is ``Cache-Control: no-store``: it shows
the operator's view of the fleet.
"""

from __future__ import annotations

import base64
import hashlib
import math
from datetime import UTC, datetime
from importlib.resources import files

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.responses import HTMLResponse, Response

__all__ = ["Pages"]


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{100 * value:.0f} %"


def _num(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:g}" if value == int(value) else f"{value:.2f}"


class Pages:
    """Renders the templates in ``templates/`` with the page headers.

    ``refresh`` is the seconds between live updates (the script's poll and the
    ``<meta refresh>`` of a browser without JavaScript).
    """

    def __init__(self, *, refresh: float = 5.0) -> None:
        static = files("fairgate.admin.dashboard") / "static"
        self._script = (static / "live.js").read_text(encoding="utf-8")
        self._style = (static / "dashboard.css").read_text(encoding="utf-8")
        self.refresh = refresh
        self.csp = "; ".join(
            [
                "default-src 'none'",
                f"script-src {_hash(self._script)}",
                f"style-src {_hash(self._style)}",
                "connect-src 'self'",
                "img-src 'self'",
                "form-action 'self'",
                "base-uri 'none'",
                "frame-ancestors 'none'",
            ]
        )
        self._env = Environment(
            loader=PackageLoader("fairgate.admin.dashboard", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.filters.update(clock=_clock, pct=_pct, num=_num)

    def render(
        self,
        template: str,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        **context: object,
    ) -> HTMLResponse:
        """The template rendered as a page with the security headers (and ``headers``)."""
        html = self._env.get_template(template).render(
            # the package's own files, allowed by their hashes in the CSP
            script=Markup(self._script),  # noqa: S704
            style=Markup(self._style),  # noqa: S704
            refresh=self.refresh,
            **context,
        )
        answer = HTMLResponse(html, status_code=status, headers=headers)
        self.secure(answer)
        return answer

    def secure(self, answer: Response) -> None:
        """Set the headers every dashboard page carries."""
        answer.headers["content-security-policy"] = self.csp
        answer.headers["x-content-type-options"] = "nosniff"
        answer.headers["x-frame-options"] = "DENY"
        answer.headers["referrer-policy"] = "same-origin"
        answer.headers["cache-control"] = "no-store"
        answer.headers["x-robots-tag"] = "noindex"
        answer.headers["cross-origin-opener-policy"] = "same-origin"
