"""The fleet's lease: which control plane places replicas and commands the agents.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_lease",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_fleet_lease"),
    )


def downgrade() -> None:
    op.drop_table("fleet_lease")
