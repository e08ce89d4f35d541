"""The ``scim:`` section: provisioning of users and groups at ``/scim/v2`` (``fairgate.scim``).

scim:
  token_file: vault:secret/fairgate#scim   # the provider's bearer token, at least 32 bytes
  max_results: 200                         # the largest page a search returns
  groups:                                  # group display name (any case) -> a role on a team
    "Lab Physics": {team: physics}         # role member by default
    "Lab Physics Leads": {team: physics, role: team_admin}

A group's members, its nested groups' members included, hold the role on the
team; only the (role, team) pairs the gateway granted this way are ever taken
away again, so roles granted by hand stay.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, StrictStr, field_validator

from fairgate.config.fields import Name, Section
from fairgate.config.secrets import SecretRef

__all__ = ["MIN_SCIM_TOKEN_BYTES", "Scim", "ScimGroup"]

MIN_SCIM_TOKEN_BYTES = 32
"""A shorter provider token is refused at start-up: it would be guessable."""


class ScimGroup(Section):
    """What the members of one provisioned group hold: ``role`` on ``team``."""

    team: Name
    role: Literal["member", "team_admin", "viewer"] = "member"


class Scim(Section):
    """SCIM 2.0 provisioning: ``token_file`` holds the identity provider's bearer token
    (a secret reference, at least 32 bytes); ``groups`` maps a group's display name,
    compared without case, to a role on a team; ``max_results`` (1..1000) bounds a page."""

    token_file: SecretRef
    max_results: StrictInt = Field(default=200, ge=1, le=1000)
    groups: dict[StrictStr, ScimGroup] = Field(default_factory=dict)

    @field_validator("groups")
    @classmethod
    def _distinct(cls, groups: dict[str, ScimGroup]) -> dict[str, ScimGroup]:
        seen: dict[str, str] = {}
        for name in groups:
            if not name.strip() or len(name) > 256:
                raise ValueError(f"group {name[:40]!r}: a name of 1 to 256 characters")
            other = seen.setdefault(name.casefold(), name)
            if other != name:
                raise ValueError(f"groups {other!r} and {name!r} differ only in case")
        return groups

    def group(self, display_name: str) -> ScimGroup | None:
        """The mapping of a group by its display name, compared without case."""
        wanted = display_name.casefold()
        return next((g for n, g in self.groups.items() if n.casefold() == wanted), None)
