"""Alert marks: one row per budget and period whose soft-limit alert was claimed.

Revision ID: 0004
Revises: 0003
Create Date: 2025-03-15
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "alert_marks",
        sa.Column("key_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("counter_key", sa.Text, nullable=False),
        sa.Column("period_end", _TS, nullable=False),
        sa.Column("claimed_at", _TS, nullable=False),
        sa.Column("sent_at", _TS, nullable=True),
        sa.Column("channels", sa.JSON, nullable=True),
        sa.PrimaryKeyConstraint("key_sha256", name="pk_alert_marks"),
    )
    op.create_index("ix_alert_marks_period_end", "alert_marks", ["period_end"])


def downgrade() -> None:
    op.drop_table("alert_marks")
