"""Tenancy: the service layer every change to the tree goes through (admin API and CLI alike).

    organisation ─< team ─< project
                     └──< key (optionally in a project, optionally owned by a user)
    user ─< role binding (root, organisation or team)

    tenancy = Tenancy(store, models=names)
    actor = Actor.operator("alice")                      # or AdminTokens.authenticate(…)
    new = await tenancy.keys.create(actor, team="lab-nlp", limits=Limits(rpm=60))

Every method takes the acting :class:`Actor` and carries the actor's scope into
the SQL (``fairgate.tenancy.scope``): listings show only what the actor may
see; a write outside the scope matches no row and changes nothing. Each change
and its audit event commit together. docs/tenancy.md has the roles matrix.

Errors (``fairgate.tenancy.errors``)::

    BadRequest 400 · Forbidden 403 (visible, not yours to change) ·
    NotFound 404 (absent or invisible) · Conflict 409 · StoreUnavailable
"""

from fairgate.tenancy.actor import Actor, Holding, Role
from fairgate.tenancy.admin_tokens import AdminTokens, NewAdminToken
from fairgate.tenancy.audit import Audit
from fairgate.tenancy.budget_record import BudgetRecord
from fairgate.tenancy.budgets import Budgets
from fairgate.tenancy.claims import ClaimCreated, Claims
from fairgate.tenancy.errors import ConfigConflict, Conflict
from fairgate.tenancy.keys import MAX_GRACE, Keys, NewKey
from fairgate.tenancy.limits import Limits
from fairgate.tenancy.orgs import DeclaredOrg, Orgs, SyncReport, declared_teams
from fairgate.tenancy.projects import Projects
from fairgate.tenancy.public import public
from fairgate.tenancy.roles import Roles
from fairgate.tenancy.runtime import (
    build_store,
    model_catalogue,
    model_names,
    open_tenancy,
    redis_notices,
    store_url,
)
from fairgate.tenancy.services import Tenancy
from fairgate.tenancy.teams import UNSET, Teams
from fairgate.tenancy.users import Users

__all__ = [
    "MAX_GRACE",
    "UNSET",
    "Actor",
    "AdminTokens",
    "Audit",
    "BudgetRecord",
    "Budgets",
    "ClaimCreated",
    "Claims",
    "ConfigConflict",
    "Conflict",
    "DeclaredOrg",
    "Holding",
    "Keys",
    "Limits",
    "NewAdminToken",
    "NewKey",
    "Orgs",
    "Projects",
    "Role",
    "Roles",
    "SyncReport",
    "Teams",
    "Tenancy",
    "Users",
    "build_store",
    "declared_teams",
    "model_catalogue",
    "model_names",
    "open_tenancy",
    "public",
    "redis_notices",
    "store_url",
]
