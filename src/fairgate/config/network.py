"""Network settings: which proxies are trusted, and which networks may call each route class.

    trusted_proxies: [10.0.0.5/32]           # X-Forwarded-For read from these only
    routes:
      metrics: {allow: [10.1.0.0/16]}        # replaces the default (loopback)
      admin: {allow: [10.2.0.0/24]}          # absent: everyone
      web: {allow: [10.0.0.0/8]}             # the web pages of the client listener

Networks are validated and kept as their normalised text
(``fairgate.core.cidr.parse_network``); the gateway builds its lookup sets from
them once, at start-up.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StrictStr

from fairgate.config.fields import Section
from fairgate.core.cidr import parse_network
from fairgate.core.route_classes import LOOPBACK

__all__ = ["Cidr", "RouteAccess", "Routes"]


def _cidr(value: str) -> str:
    return str(parse_network(value))


Cidr = Annotated[StrictStr, AfterValidator(_cidr)]
"""A network (``10.0.0.0/8``, ``2001:db8::/32``) or a bare address (its /32 or /128)."""


class RouteAccess(Section):
    """Who may call one route class: ``allow`` lists its networks (null: everyone;
    an empty list: nobody)."""

    allow: tuple[Cidr, ...] | None = None


class Routes(Section):
    """The networks of each route class (``fairgate.core.route_classes``)."""

    inference: RouteAccess = Field(default_factory=RouteAccess)
    web: RouteAccess = Field(default_factory=RouteAccess)
    admin: RouteAccess = Field(default_factory=RouteAccess)
    metrics: RouteAccess = Field(default_factory=lambda: RouteAccess(allow=LOOPBACK))
    health: RouteAccess = Field(default_factory=lambda: RouteAccess(allow=LOOPBACK))
