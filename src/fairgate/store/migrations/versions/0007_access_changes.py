"""Access changes: the feed every gateway process reads to forget withdrawn keys at once.

Revision ID: 0007
Revises: 0006
Create Date: 2025-04-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "access_changes",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_access_changes"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_access_changes_at", "access_changes", ["at"])


def downgrade() -> None:
    op.drop_table("access_changes")
