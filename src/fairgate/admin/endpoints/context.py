"""What every admin endpoint declares: ``Caller``, the actor behind the request's bearer.

The authenticator lives in the application's state (set by ``build_admin_app``),
so endpoints reach it through the request and no module holds it.

Without an ``Authorization`` header, an admin web session's cookie (the dashboard's
sign-in or single sign-on) is the credential, its actor rebuilt from the store on
every request. A request that changes anything (any method but GET, HEAD, OPTIONS)
with the cookie must then carry the session's CSRF token in ``X-CSRF-Token`` (as
``GET /admin/session`` gives it) and not be marked cross-site by the browser: else
403 ``csrf``. No cookie and no bearer: the 401 of a missing credential.
"""

import hmac
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import Request

from fairgate.admin.authn import AdminAuthenticator, bearer
from fairgate.admin.dashboard.access import Access
from fairgate.admin.dashboard.origin import same_site
from fairgate.core.errors import Forbidden
from fairgate.tenancy import Actor, public

__all__ = ["Caller", "listing"]


async def _caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Actor:
    authenticator: AdminAuthenticator = request.app.state.authenticator
    access: Access | None = getattr(request.app.state, "access", None)
    if credentials is None and access is not None and "authorization" not in request.headers:
        caller = await access.session_caller(request)
        if caller is not None:
            if request.method not in _SAFE and not _csrf_ok(request, caller.csrf):
                raise Forbidden("send the session's X-CSRF-Token from this site", code="csrf")
            return caller.actor
    return await authenticator(request, credentials)


_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def _csrf_ok(request: Request, token: str | None) -> bool:
    submitted = request.headers.get("x-csrf-token")
    if token is None or submitted is None or not same_site(request):
        return False
    return hmac.compare_digest(token.encode(), submitted.encode())


Caller = Annotated[Actor, Depends(_caller)]
"""An endpoint parameter typed ``Caller`` receives the authenticated :class:`Actor`."""


def listing(records: Sequence[object]) -> dict[str, list[dict[str, Any]]]:
    """``{"data": [...]}``, each record in its public form."""
    return {"data": [public(r) for r in records]}
