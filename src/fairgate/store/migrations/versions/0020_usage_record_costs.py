"""Usage records keep the parts of their cost charged to models other than their own.

A new table, so the records already stored are untouched and read as before: a record
without rows here charged its whole cost to its own model, as every earlier one did.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_record_costs",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("pool", sa.String(128), nullable=True),
        sa.Column("cost_micro", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", "model", name="pk_usage_record_costs"),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["usage_records.request_id"],
            name="fk_usage_record_costs_request_id_usage_records",
        ),
    )


def downgrade() -> None:
    op.drop_table("usage_record_costs")
