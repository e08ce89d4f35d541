"""Accounting: one usage record per request, and its tags.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("key_id", sa.String(128), nullable=False),
        sa.Column("org", sa.String(128), nullable=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("project", sa.String(128), nullable=True),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("pool", sa.String(128), nullable=True),
        sa.Column("replica", sa.String(256), nullable=True),
        sa.Column("route", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("cached_tokens", sa.BigInteger, nullable=False),
        sa.Column("cost_micro", sa.BigInteger, nullable=False),
        sa.Column("estimated", sa.Boolean, nullable=False),
        sa.Column("ttft_ms", sa.Integer, nullable=True),
        sa.Column("total_ms", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_usage_records"),
    )
    op.create_index("ix_usage_records_at", "usage_records", ["at"])
    op.create_index("ix_usage_records_key_id", "usage_records", ["key_id"])
    op.create_table(
        "usage_record_tags",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("tag", sa.String(256), nullable=False),
        sa.PrimaryKeyConstraint("request_id", "tag", name="pk_usage_record_tags"),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["usage_records.request_id"],
            name="fk_usage_record_tags_request_id_usage_records",
        ),
    )


def downgrade() -> None:
    op.drop_table("usage_record_tags")
    op.drop_table("usage_records")
