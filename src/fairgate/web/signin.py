"""``/signin``, ``/signup`` and ``/signout``: the forms before and at the end of a session.

Sign-up answers one page with one status (200) whether or not the address
already had an account; only a malformed address or a password outside
12..1024 characters is refused (400, the form again), and those answers depend
on what was typed, never on the store. Sign-in answers one refusal (401, the
form again, "wrong e-mail address or password") for a wrong password, a
missing, pending or suspended account; 429 with ``Retry-After`` past the guess
limits; 503 with ``Retry-After`` when the verification pool is full. A
successful sign-in closes any session the browser had, opens a new one (a new
id: a planted cookie is worthless) and redirects to ``/account`` (303).
Sign-out closes the session in the store at once; the old cookie opens nothing
after it. The dashboard's admin sessions share the cookie's name: a sign-out here
with a cookie that names one closes it too, since the browser drops the cookie.

The signed-out forms carry a browser-bound token (``fairgate.web.csrf``);
sign-out carries the session's. Every POST is refused when the browser marks
it cross-site (``fairgate.web.origin``).
"""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from fairgate.accounts import (
    COOKIE,
    Accounts,
    EmailRejected,
    PasswordRejected,
    Sessions,
    SignInRefused,
    TooManyGuesses,
    VerifierBusy,
)
from fairgate.core.clock import Clock
from fairgate.web.cookies import clear_session_cookie, set_session_cookie, utc_now
from fairgate.web.csrf import FormTokens
from fairgate.web.errors import PageError
from fairgate.web.forms import Form, FormRefused, read_form
from fairgate.web.origin import Origins
from fairgate.web.render import Pages
from fairgate.web.site import Site
from fairgate.web.visitor import Visitors

__all__ = ["SignPages"]

_REFUSED = "Wrong e-mail address or password, or the account is not approved yet."
_MAX_EMAIL = 320
_MAX_PASSWORD_FIELD = 4096  # the service refuses > 1024 characters; this bounds the work


class SignPages:
    """Sign-up, sign-in and sign-out over the Accounts service."""

    def __init__(
        self,
        site: Site,
        pages: Pages,
        origins: Origins,
        forms: FormTokens,
        accounts: Accounts,
        sessions: Sessions,
        visitors: Visitors,
        clock: Clock,
    ) -> None:
        self._site = site
        self._pages = pages
        self._origins = origins
        self._forms = forms
        self._accounts = accounts
        self._sessions = sessions
        self._visitors = visitors
        self._clock = clock

    async def signup_form(self, request: Request) -> Response:
        return self._form(request, "signup.html")

    async def signin_form(self, request: Request) -> Response:
        if await self._visitors.current(request) is not None:
            return RedirectResponse("/account", status_code=303)
        return self._form(request, "signin.html")

    async def signup(self, request: Request) -> Response:
        form = await self._signed_out_form(request, "signup.html")
        email, password = _fields(form)
        try:
            await self._accounts.sign_up(email, password, network=self._origins.address(request))
        except EmailRejected:
            return self._form(request, "signup.html", 400, "That is not an e-mail address.", email)
        except PasswordRejected:
            return self._form(
                request,
                "signup.html",
                400,
                "The password must be between 12 and 1024 characters long.",
                email,
            )
        except TooManyGuesses as busy:
            raise PageError(
                429,
                "sign-up: too many sign-ups from the network",
                message="Too many sign-up attempts. Wait a while and try again.",
                headers={"retry-after": str(max(1, math.ceil(busy.retry_after)))},
            ) from None
        except VerifierBusy:
            raise PageError(503, "sign-up: verifier busy", headers={"retry-after": "1"}) from None
        return self._pages.html("signed_up.html")

    async def signin(self, request: Request) -> Response:
        form = await self._signed_out_form(request, "signin.html")
        email, password = _fields(form)
        address = self._origins.address(request)
        try:
            opened = await self._accounts.sign_in(email, password, network=address)
        except SignInRefused:
            return self._form(request, "signin.html", 401, _REFUSED, email)
        except TooManyGuesses as busy:
            wait = str(max(1, math.ceil(busy.retry_after)))
            raise PageError(
                429,
                "sign-in: too many guesses for the address or network",
                message="Too many sign-in attempts. Wait a while and try again.",
                headers={"retry-after": wait},
            ) from None
        except VerifierBusy:
            raise PageError(
                503,
                "sign-in: verifier busy",
                message="Sign-in is busy right now. Try again in a moment.",
                headers={"retry-after": "1"},
            ) from None
        old = request.cookies.get(COOKIE)
        if old is not None:
            await self._sessions.close(old)
        answer = RedirectResponse("/account", status_code=303)
        set_session_cookie(answer, opened, utc_now(self._clock.wall()))
        return answer

    async def signout(self, request: Request) -> Response:
        self._visitors.same_site(request)
        form = await _read(request, self._site.max_form_bytes)
        visitor = await self._visitors.current(request)
        if visitor is not None:
            self._visitors.check_form(request, visitor, form)
            await self._sessions.close(visitor.cookie_value)
        elif (cookie := request.cookies.get(COOKIE)) is not None:
            # the cookie names another kind of session (the dashboard's shares its name):
            # the browser drops it now, so the store ends it now too
            await self._sessions.close(cookie)
        answer = RedirectResponse("/", status_code=303)
        clear_session_cookie(answer)
        return answer

    async def _signed_out_form(self, request: Request, template: str) -> Form:
        self._visitors.same_site(request)
        form = await _read(request, self._site.max_form_bytes)
        if not self._forms.check(request, form.get("csrf")):
            raise PageError(
                403,
                f"{template}: no matching form token",
                message="This form has expired. Reload the page and try again.",
            )
        return form

    def _form(
        self,
        request: Request,
        template: str,
        status: int = 200,
        error: str | None = None,
        email: str = "",
    ) -> Response:
        csrf = self._forms.issue(request)
        page = self._pages.html(template, status=status, csrf=csrf, error=error, email=email)
        self._forms.attach(page, csrf)
        return page


async def _read(request: Request, max_bytes: int) -> Form:
    try:
        return await read_form(request, max_bytes=max_bytes)
    except FormRefused as refused:
        raise PageError(refused.status, refused.reason) from None


def _fields(form: Form) -> tuple[str, str]:
    email, password = form.get("email"), form.get("password")
    if email is None or password is None:
        raise PageError(400, "form without email or password")
    if len(email) > _MAX_EMAIL or len(password) > _MAX_PASSWORD_FIELD:
        raise PageError(413, "email or password field too long")
    return email, password
