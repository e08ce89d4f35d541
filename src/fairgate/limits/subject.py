"""Who a request is charged to: its key and every scope above it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["ScopeKind", "Subject"]

ScopeKind = Literal["org", "team", "project", "key", "tag"]


@dataclass(frozen=True, slots=True)
class Subject:
    """The scopes one request falls under: its key, the key's project, team and
    organisation, and every tag it carries. Names are opaque identifiers (a key's
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
            yield "tag", tag
