"""Tenancy: organisations, teams, projects, users, keys, role bindings, admin tokens, audit events.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def _name() -> sa.String:
    return sa.String(128)


def upgrade() -> None:
    op.create_table(
        "orgs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", _name(), nullable=False),
        sa.Column("share", sa.Float, nullable=True),
        sa.Column("declared", sa.Boolean, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("disabled_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_orgs"),
        sa.UniqueConstraint("name", name="uq_orgs_name"),
    )
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("org_id", sa.Integer, nullable=False),
        sa.Column("name", _name(), nullable=False),
        sa.Column("declared", sa.Boolean, nullable=False),
        sa.Column("models", sa.JSON, nullable=True),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("tpm", sa.Integer, nullable=True),
        sa.Column("rpd", sa.Integer, nullable=True),
        sa.Column("max_in_flight", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("disabled_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_teams"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name="fk_teams_org_id_orgs"),
        sa.UniqueConstraint("name", name="uq_teams_name"),
    )
    op.create_index("ix_teams_org_id", "teams", ["org_id"])
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("team_id", sa.Integer, nullable=False),
        sa.Column("name", _name(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("disabled_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_projects"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name="fk_projects_team_id_teams"),
        sa.UniqueConstraint("team_id", "name", name="uq_projects_team_id_name"),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", _name(), nullable=False),
        sa.Column("org_id", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("disabled_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name="fk_users_org_id_orgs"),
        sa.UniqueConstraint("name", name="uq_users_name"),
    )
    op.create_index("ix_users_org_id", "users", ["org_id"])
    _keys()
    op.create_table(
        "role_bindings",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("scope_kind", sa.String(8), nullable=False),
        sa.Column("scope_id", sa.Integer, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_role_bindings"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_role_bindings_user_id_users"),
        sa.UniqueConstraint(
            "user_id",
            "role",
            "scope_kind",
            "scope_id",
            name="uq_role_bindings_user_id_role_scope_kind_scope_id",
        ),
    )
    op.create_table(
        "admin_tokens",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("name", _name(), nullable=True),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("secret_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=True),
        sa.Column("revoked_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_admin_tokens"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_admin_tokens_user_id_users"),
        sa.UniqueConstraint("secret_sha256", name="uq_admin_tokens_secret_sha256"),
    )
    op.create_index("ix_admin_tokens_user_id", "admin_tokens", ["user_id"])
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("at", _TS, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(300), nullable=True),
        sa.Column("org_id", sa.Integer, nullable=True),
        sa.Column("team_id", sa.Integer, nullable=True),
        sa.Column("remote", sa.String(64), nullable=True),
        sa.Column("detail", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_org_id_team_id", "audit_events", ["org_id", "team_id"])


def _keys() -> None:
    op.create_table(
        "keys",
        sa.Column("id", sa.String(26), primary_key=True),
        sa.Column("team_id", sa.Integer, nullable=False),
        sa.Column("project_id", sa.Integer, nullable=True),
        sa.Column("owner_id", sa.Integer, nullable=True),
        sa.Column("name", _name(), nullable=True),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("secret_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("previous_sha256", sa.LargeBinary(32), nullable=True),
        sa.Column("previous_until", _TS, nullable=True),
        sa.Column("models", sa.JSON, nullable=True),
        sa.Column("tags", sa.JSON, nullable=False),
        sa.Column("rpm", sa.Integer, nullable=True),
        sa.Column("tpm", sa.Integer, nullable=True),
        sa.Column("rpd", sa.Integer, nullable=True),
        sa.Column("max_in_flight", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("expires_at", _TS, nullable=True),
        sa.Column("revoked_at", _TS, nullable=True),
        sa.Column("changed_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_keys"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name="fk_keys_team_id_teams"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_keys_project_id_projects"
        ),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_keys_owner_id_users"),
        sa.UniqueConstraint("secret_sha256", name="uq_keys_secret_sha256"),
    )
    for column in ("team_id", "project_id", "owner_id", "previous_sha256", "changed_at"):
        op.create_index(f"ix_keys_{column}", "keys", [column])


def downgrade() -> None:
    for table in (
        "audit_events",
        "admin_tokens",
        "role_bindings",
        "keys",
        "users",
        "projects",
        "teams",
        "orgs",
    ):
        op.drop_table(table)
