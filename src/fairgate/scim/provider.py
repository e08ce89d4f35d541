"""What ``/scim/v2`` announces about itself: RFC 7643's User (with the enterprise extension)
and Group, and a ServiceProviderConfig saying what the gateway serves.

PATCH, filters (at most ``max_results`` a page), sorting and ETags are served;
bulk requests and password changes are not (the gateway keeps no password).
The token is a bearer token (``oauthbearertoken``).
"""

from __future__ import annotations

from scim2_models import (
    AuthenticationScheme,
    Bulk,
    ChangePassword,
    ETag,
    Filter,
    Patch,
    ScimProvider,
    ServiceProviderConfig,
    Sort,
)
from scim2_server.utils import load_default_resource_types, load_default_schemas

__all__ = ["scim_provider"]


def scim_provider(max_results: int) -> ScimProvider:
    config = ServiceProviderConfig(
        patch=Patch(supported=True),
        bulk=Bulk(supported=False, max_operations=0, max_payload_size=0),
        filter=Filter(supported=True, max_results=max_results),
        change_password=ChangePassword(supported=False),
        sort=Sort(supported=True),
        etag=ETag(supported=True),
        authentication_schemes=[
            AuthenticationScheme(
                type=AuthenticationScheme.Type.oauthbearertoken,
                name="Bearer token",
                description="The token of scim.token_file, as Authorization: Bearer",
                primary=True,
            )
        ],
    )
    return ScimProvider.from_discovery(
        load_default_schemas().values(), load_default_resource_types().values(), config=config
    )
