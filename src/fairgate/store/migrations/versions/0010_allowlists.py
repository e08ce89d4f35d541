"""IP allowlists: one row per organisation, team or key whose requests must come from a list.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "allowlists",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(4), nullable=False),
        sa.Column("org_id", sa.Integer, nullable=True),
        sa.Column("team_id", sa.Integer, nullable=True),
        sa.Column("key_id", sa.String(26), nullable=True),
        sa.Column("cidrs", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_allowlists"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], name="fk_allowlists_org_id_orgs"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name="fk_allowlists_team_id_teams"),
        sa.ForeignKeyConstraint(["key_id"], ["keys.id"], name="fk_allowlists_key_id_keys"),
        sa.UniqueConstraint("org_id", name="uq_allowlists_org_id"),
        sa.UniqueConstraint("team_id", name="uq_allowlists_team_id"),
        sa.UniqueConstraint("key_id", name="uq_allowlists_key_id"),
    )


def downgrade() -> None:
    op.drop_table("allowlists")
