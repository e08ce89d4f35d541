"""Access-token callers: the people known by (issuer, subject), and their exchanged keys.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "people",
        sa.Column("key_id", sa.String(26), nullable=False),
        sa.Column("issuer", sa.String(1000), nullable=False),
        sa.Column("subject", sa.String(1024), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(200), nullable=True),
        sa.PrimaryKeyConstraint("key_id", name="pk_people"),
    )
    op.create_table(
        "person_keys",
        sa.Column("secret_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("key_id", sa.String(26), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("secret_sha256", name="pk_person_keys"),
        sa.ForeignKeyConstraint(["key_id"], ["keys.id"], name="fk_person_keys_key_id_keys"),
    )
    op.create_index("ix_person_keys_key_id", "person_keys", ["key_id"])
    op.create_index("ix_person_keys_expires_at", "person_keys", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_person_keys_expires_at", "person_keys")
    op.drop_index("ix_person_keys_key_id", "person_keys")
    op.drop_table("person_keys")
    op.drop_table("people")
