"""The public names of fairgate.tenancy."""

from __future__ import annotations

import fairgate.tenancy as tenancy


def test_exported_members() -> None:
    assert set(tenancy.__all__) == {
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
        "Limits",
        "Keys",
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
    }
    for name in tenancy.__all__:
        assert hasattr(tenancy, name)


def test_the_config_org_satisfies_declared_org() -> None:
    from fairgate.config.catalog import Org

    declared: tenancy.DeclaredOrg = Org(name="A", share=0.5, teams=("t",))
    assert declared.teams == ("t",)
