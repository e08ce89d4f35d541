"""Claim links: a key's secret handed over once, by a link, sealed until then.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "claim_links",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("key_id", sa.String(26), nullable=False),
        sa.Column("lookup", sa.LargeBinary(32), nullable=False),
        sa.Column("sealed", sa.LargeBinary(256), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_claim_links"),
        sa.ForeignKeyConstraint(["key_id"], ["keys.id"], name="fk_claim_links_key_id_keys"),
        sa.UniqueConstraint("key_id", name="uq_claim_links_key_id"),
        sa.UniqueConstraint("lookup", name="uq_claim_links_lookup"),
    )


def downgrade() -> None:
    op.drop_table("claim_links")
