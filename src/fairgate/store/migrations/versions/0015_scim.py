"""SCIM provisioning: the pushed users and groups, the users SCIM manages, the roles it granted.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scim_resources",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("name_key", sa.String(256), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_scim_resources"),
        sa.UniqueConstraint("kind", "name_key", name="uq_scim_resources_kind_name_key"),
    )
    op.create_table(
        "scim_users",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_scim_users"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_scim_users_user_id_users"),
    )
    op.create_table(
        "scim_grants",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "role", "team_id", name="pk_scim_grants"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_scim_grants_user_id_users"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name="fk_scim_grants_team_id_teams"),
    )


def downgrade() -> None:
    op.drop_table("scim_grants")
    op.drop_table("scim_users")
    op.drop_table("scim_resources")
