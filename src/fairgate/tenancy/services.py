"""``Tenancy``: every tenancy service over one store, shared by the admin API and the CLI."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from fairgate.auth.pepper import KeyHasher
from fairgate.core.clock import Clock, SystemClock
from fairgate.store import Store
from fairgate.tenancy.admin_tokens import AdminTokens
from fairgate.tenancy.allowlists import Allowlists
from fairgate.tenancy.audit import Audit
from fairgate.tenancy.budgets import Budgets
from fairgate.tenancy.claims import Claims
from fairgate.tenancy.keys import Keys
from fairgate.tenancy.orgs import DeclaredOrg, Orgs, SyncReport
from fairgate.tenancy.people import People
from fairgate.tenancy.projects import Projects
from fairgate.tenancy.roles import Roles
from fairgate.tenancy.teams import Teams
from fairgate.tenancy.users import Users

__all__ = ["Tenancy"]


class Tenancy:
    """The tenancy services: ``orgs``, ``teams``, ``projects``, ``keys``, ``users``, ``roles``,
    ``admin_tokens``, ``audit``, ``budgets``, ``allowlists``, ``claims``, ``people``. Every
    method takes the acting :class:`Actor` first (except the start-up sync, token
    authentication, a claim link's peek and redeem and a person's lookup, where the token is
    the credential) and enforces its scope in SQL.

    ``models``: every model name the gateway serves (canonical names and aliases);
    allowlists naming anything else are refused. None accepts any name. A mapping
    (``model_catalogue``: name → canonical name) also canonicalises the model of a
    per-model budget.
    ``declared_teams``: the team names the configuration declares, which
    ``teams.create`` refuses (``fairgate.tenancy.orgs.declared_teams``).
    ``hasher``: how key and admin-token secrets are stored (``fairgate.auth.pepper``;
    plain SHA-256 by default, HMAC with ``auth.key_pepper_file``).
    ``public_url``: the base URL of claim links (``public_url`` in the configuration);
    None refuses to create them.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        models: Collection[str] | Mapping[str, str] | None = None,
        declared_teams: Collection[str] = (),
        hasher: KeyHasher | None = None,
        public_url: str | None = None,
    ) -> None:
        clock = clock or SystemClock()
        self.store = store
        self.hasher = hasher or KeyHasher()
        self.orgs = Orgs(store, clock, models=models)
        self.teams = Teams(store, clock, models=models, reserved=declared_teams)
        self.projects = Projects(store, clock, models=models)
        self.keys = Keys(store, clock, models=models, hasher=self.hasher)
        self.users = Users(store, clock, models=models)
        self.roles = Roles(store, clock, models=models)
        self.admin_tokens = AdminTokens(store, clock, models=models, hasher=self.hasher)
        self.audit = Audit(store, clock, models=models)
        self.budgets = Budgets(store, clock, models=models)
        self.allowlists = Allowlists(store, clock, models=models)
        self.people = People(store, clock, models=models, hasher=self.hasher)
        self.claims = Claims(
            store, clock, keys=self.keys, hasher=self.hasher, public_url=public_url
        )

    async def sync_orgs(self, declared: Sequence[DeclaredOrg]) -> SyncReport:
        """Make the store's organisations and teams match the configuration's ``orgs``."""
        return await self.orgs.sync(declared)
