"""What every admin endpoint declares: ``Caller``, the actor behind the request's bearer.

The authenticator lives in the application's state (set by ``build_admin_app``),
so endpoints reach it through the request and no module holds it.
"""

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import Request

from fairgate.admin.authn import AdminAuthenticator, bearer
from fairgate.tenancy import Actor, public

__all__ = ["Caller", "listing"]


async def _caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Actor:
    authenticator: AdminAuthenticator = request.app.state.authenticator
    return await authenticator(request, credentials)


Caller = Annotated[Actor, Depends(_caller)]
"""An endpoint parameter typed ``Caller`` receives the authenticated :class:`Actor`."""


def listing(records: Sequence[object]) -> dict[str, list[dict[str, Any]]]:
    """``{"data": [...]}``, each record in its public form."""
    return {"data": [public(r) for r in records]}
