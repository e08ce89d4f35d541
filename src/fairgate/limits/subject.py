"""Who a request is charged to: its key and every scope above it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["OWNED_TAG_PREFIXES", "ScopeKind", "Subject", "tag_scopes"]

ScopeKind = Literal["org", "team", "project", "key", "tag"]


@dataclass(frozen=True, slots=True)
class Subject:
    """The scopes one request falls under: its key, the key's project, team and
    organisation, and every tag it carries (each under its organisation, its team and
    the proxy: ``tag_scopes``). Names are opaque identifiers (a key's
    id, never its secret); a project name must be unique within its team's
    organisation as far as budgets are concerned (pass ``team/project`` if not)."""

    key: str
    org: str
    team: str
    project: str | None = None
    tags: tuple[str, ...] = ()

    def scopes(self) -> Iterator[tuple[ScopeKind, str]]:
        """Every (kind, name) the request falls under, from the widest."""
        yield "org", self.org
        yield "team", self.team
        if self.project is not None:
            yield "project", self.project
        yield "key", self.key
        for tag in dict.fromkeys(self.tags):
            yield from tag_scopes(self.org, self.team, tag)


def tag_scopes(org: str, team: str, tag: str) -> Iterator[tuple[ScopeKind, str]]:
    """The tag budgets a request of ``org``/``team`` carrying ``tag`` falls under: the
    organisation's (``org:ORG/TAG``), the team's (``team:TEAM/TAG``) and the proxy-wide
    one (the bare tag). Organisation and team names never hold ``/``, so the owner is
    read up to the first one; a tag spelled like an owned name (``org:…``, ``team:…``)
    has no proxy-wide budget, so no request can charge another tenant's by naming it."""
    yield "tag", f"org:{org}/{tag}"
    yield "tag", f"team:{team}/{tag}"
    if not tag.startswith(OWNED_TAG_PREFIXES):
        yield "tag", tag


OWNED_TAG_PREFIXES = ("org:", "team:")
"""How an owned tag scope's name starts; a proxy-wide tag never starts so."""
