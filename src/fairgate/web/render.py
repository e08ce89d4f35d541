"""Pages from the Jinja2 templates in ``templates/``: autoescaped, no external asset.

Every page extends ``base.html`` (the stylesheet at ``/static/style.css``, no
script). ``Pages.html`` renders one to a response with the status and any extra
headers; the security headers are added by ``fairgate.web.headers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import HTMLResponse

__all__ = ["Pages"]


class Pages:
    """The template set, loaded once; ``site`` is given to every template as ``site``."""

    def __init__(self, site: Mapping[str, Any]) -> None:
        self._env = Environment(
            loader=PackageLoader("fairgate.web", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._site = dict(site)

    def render(self, template: str, **context: Any) -> str:
        """The page's HTML (every value escaped unless the template marks it safe)."""
        return self._env.get_template(template).render(site=self._site, **context)

    def html(
        self,
        template: str,
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        """The page as a response."""
        return HTMLResponse(self.render(template, **context), status, headers=dict(headers or {}))
