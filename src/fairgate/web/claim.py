"""``/claim/{token}``: a one-time key link, opened by a person (``fairgate.tenancy.claims``).

    GET   a page with one button; consumes nothing (chat unfurlers and mail
          scanners fetch links, and must not burn them)
    POST  the key's secret, once; the link is burnt in the same UPDATE

A used, expired and never-valid link all get the same page, byte for byte, with
the same status (404), on GET and on POST: the page holds nothing that depends
on the token. Every claim page is ``Cache-Control: no-store``,
``Referrer-Policy: no-referrer`` and ``X-Robots-Tag: noindex``. The POST is
refused (403 page, before the link is looked at) when it comes from another
site or without the form's token (``fairgate.web.csrf``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from fairgate.tenancy.claims import Claims
from fairgate.web.csrf import FormTokens
from fairgate.web.errors import PageError
from fairgate.web.forms import FormRefused, read_form
from fairgate.web.origin import Origins
from fairgate.web.render import Pages
from fairgate.web.site import Site

__all__ = ["CLAIM_HEADERS", "ClaimPages"]

CLAIM_HEADERS = {
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-robots-tag": "noindex, nofollow",
}


class ClaimPages:
    """The two claim pages over the Claims service."""

    def __init__(
        self, site: Site, pages: Pages, origins: Origins, claims: Claims, forms: FormTokens
    ) -> None:
        self._site = site
        self._pages = pages
        self._origins = origins
        self._claims = claims
        self._forms = forms

    async def get(self, request: Request) -> Response:
        token = request.path_params["token"]
        if not await self._claims.peek(token):
            return self._gone()
        csrf = self._forms.issue(request)
        page = self._pages.html("claim.html", headers=CLAIM_HEADERS, token=token, csrf=csrf)
        self._forms.attach(page, csrf)
        return page

    async def post(self, request: Request) -> Response:
        token = request.path_params["token"]
        why = self._origins.cross_site(request)
        if why is not None:
            raise PageError(403, f"claim POST refused: {why}", headers=CLAIM_HEADERS)
        try:
            form = await read_form(request, max_bytes=self._site.max_form_bytes)
        except FormRefused as refused:
            raise PageError(refused.status, refused.reason, headers=CLAIM_HEADERS) from None
        if not self._forms.check(request, form.get("csrf")):
            raise PageError(
                403,
                "claim POST without the browser's form token",
                message="This form has expired. Open the link again and press the button.",
                headers=CLAIM_HEADERS,
            )
        secret = await self._claims.redeem(token, remote=self._origins.address(request))
        if secret is None:
            return self._gone()
        return self._pages.html("claimed.html", headers=CLAIM_HEADERS, secret=secret)

    def _gone(self) -> Response:
        return self._pages.html("claim_gone.html", status=404, headers=CLAIM_HEADERS)
