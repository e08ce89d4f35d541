"""Route classes and the networks each may be called from.

Every path the gateway serves belongs to one class:

    inference   every route of the client listener (the OpenAI API, /me, …) but the pages
    web         the web pages of the client listener: /, /signup, /signin, /signout,
                /account…, /claim/…, /static/… (``fairgate.web``)
    admin       every other path of the admin listener: /admin/*, the OpenAPI document, /scim/v2
    metrics     /metrics on the admin listener
    health      /healthz and /readyz on the admin listener

A class either answers everyone (no rule) or only clients whose address — the
one resolved through trusted proxies (``fairgate.core.client_addr``) — lies in
its networks. A refusal is one answer for every class (:func:`refusal`): it
names neither the rule nor the class, so probing tells a caller only that it
may not call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from fairgate.core.cidr import NetworkSet
from fairgate.core.errors import Forbidden

__all__ = ["LOOPBACK", "RouteClass", "RouteRules", "admin_class", "refusal"]

RouteClass = Literal["inference", "web", "admin", "metrics", "health"]

LOOPBACK = ("127.0.0.0/8", "::1/128")
"""Where metrics and health answer unless the configuration says otherwise."""


_ADMIN_CLASSES: dict[str, RouteClass] = {
    "/metrics": "metrics",
    "/healthz": "health",
    "/readyz": "health",
}


def refusal() -> Forbidden:
    """What a request from outside its class's networks gets (403, the same for every class)."""
    return Forbidden("forbidden", code="forbidden")


def admin_class(path: str) -> RouteClass:
    """The class of an admin-listener path, as the router matches it (unknown paths: admin)."""
    return _ADMIN_CLASSES.get(path, "admin")


class RouteRules:
    """The networks of each route class; a class absent from ``allow`` answers everyone."""

    __slots__ = ("_allow",)

    def __init__(self, allow: Mapping[RouteClass, NetworkSet]) -> None:
        self._allow = dict(allow)

    def restricts(self, route_class: RouteClass) -> bool:
        """Whether the class has a rule at all (no rule: nothing to check per request)."""
        return route_class in self._allow

    def allows(self, route_class: RouteClass, address: str) -> bool:
        """Whether a client at ``address`` may call a route of ``route_class``."""
        networks = self._allow.get(route_class)
        return networks is None or networks.holds(address)
