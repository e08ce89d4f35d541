"""Who is acting: the roles a caller holds on the tree (root > organisation > team).

    Actor.operator("alice")     the CLI on the gateway host: proxy_admin at the root
    Actor.master_key(remote)    the admin API's master key: proxy_admin at the root
    Actor(name="user:bob", user_id=7, holds=(Holding(Role.TEAM_ADMIN, "team", 3),))

An actor is built per request (admin API) or per command (CLI) and never
cached, so a removed role binding applies at once. The sets below are what the
scope clauses of ``fairgate.tenancy.scope`` are made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

__all__ = ["Actor", "Holding", "Role", "ScopeKind"]

ScopeKind = Literal["root", "org", "team"]


class Role(StrEnum):
    """The six roles, each bound on one kind of scope (see ``SCOPES``)."""

    PROXY_ADMIN = "proxy_admin"
    PROXY_VIEWER = "proxy_viewer"
    ORG_ADMIN = "org_admin"
    TEAM_ADMIN = "team_admin"
    MEMBER = "member"
    VIEWER = "viewer"


SCOPES: dict[Role, tuple[ScopeKind, ...]] = {
    Role.PROXY_ADMIN: ("root",),
    Role.PROXY_VIEWER: ("root",),
    Role.ORG_ADMIN: ("org",),
    Role.TEAM_ADMIN: ("team",),
    Role.MEMBER: ("team",),
    Role.VIEWER: ("org", "team"),
}
"""Where each role may be bound: a viewer reads an organisation or one team."""


@dataclass(frozen=True, slots=True)
class Holding:
    """One role held on one scope: ``scope_id`` is 0 for the root, else an org or team id."""

    role: Role
    scope_kind: ScopeKind
    scope_id: int = 0


@dataclass(frozen=True, slots=True)
class Actor:
    """A caller of the tenancy services and what it holds.

    ``name`` is what audit events record (``operator:alice``, ``master-key``,
    ``user:bob``); ``user_id`` is set for a user, None for the operator and the
    master key; ``remote`` is the client address of an admin API call.
    """

    name: str
    user_id: int | None = None
    holds: tuple[Holding, ...] = ()
    remote: str | None = None
    _ids: dict[Role, frozenset[int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for role in Role:
            ids = frozenset(h.scope_id for h in self.holds if h.role is role)
            self._ids[role] = ids

    @classmethod
    def operator(cls, name: str) -> Actor:
        """The operator's shell on the gateway host: everything, like the master key."""
        return cls(name=f"operator:{name}", holds=(Holding(Role.PROXY_ADMIN, "root"),))

    @classmethod
    def master_key(cls, remote: str | None = None) -> Actor:
        return cls(name="master-key", holds=(Holding(Role.PROXY_ADMIN, "root"),), remote=remote)

    @classmethod
    def system(cls, name: str) -> Actor:
        """The gateway itself (the configuration sync at start-up)."""
        return cls(name=f"system:{name}", holds=(Holding(Role.PROXY_ADMIN, "root"),))

    def ids(self, role: Role, kind: ScopeKind | None = None) -> frozenset[int]:
        """Scope ids on which this actor holds ``role`` (of one kind, for a viewer)."""
        if kind is None:
            return self._ids[role]
        return frozenset(h.scope_id for h in self.holds if h.role is role and h.scope_kind == kind)

    @property
    def root_admin(self) -> bool:
        return bool(self._ids[Role.PROXY_ADMIN])

    @property
    def root_reader(self) -> bool:
        return self.root_admin or bool(self._ids[Role.PROXY_VIEWER])

    @property
    def admin_orgs(self) -> frozenset[int]:
        return self._ids[Role.ORG_ADMIN]

    @property
    def admin_teams(self) -> frozenset[int]:
        return self._ids[Role.TEAM_ADMIN]

    @property
    def member_teams(self) -> frozenset[int]:
        return self._ids[Role.MEMBER]

    @property
    def read_orgs(self) -> frozenset[int]:
        """Organisations read whole: administered or viewed."""
        return self.admin_orgs | self.ids(Role.VIEWER, "org")

    @property
    def read_teams(self) -> frozenset[int]:
        """Teams read whole (their keys too): administered or viewed."""
        return self.admin_teams | self.ids(Role.VIEWER, "team")
