"""Team totals: limits shared by all of a team's keys, and keys per member.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TOTALS = ("total_rpm", "total_tpm", "total_rpd", "total_max_in_flight")


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        for name in _TOTALS:
            batch.add_column(sa.Column(name, sa.Integer, nullable=True))
        batch.add_column(
            sa.Column("max_keys_per_member", sa.Integer, nullable=False, server_default="10")
        )


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        for name in (*_TOTALS, "max_keys_per_member"):
            batch.drop_column(name)
