"""Web accounts and their sessions.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fairgate.store.timestamp import UtcDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("email", sa.String(128), nullable=False),
        sa.Column("password_hash", sa.String(512), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("user_id", sa.Integer, nullable=True),
        sa.Column("team_id", sa.Integer, nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("approved_at", UtcDateTime(), nullable=True),
        sa.Column("suspended_at", UtcDateTime(), nullable=True),
        sa.Column("notified_at", UtcDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_accounts_user_id_users"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name="fk_accounts_team_id_teams"),
        sa.PrimaryKeyConstraint("id", name="pk_accounts"),
        sa.UniqueConstraint("email", name="uq_accounts_email"),
        sa.UniqueConstraint("user_id", name="uq_accounts_user_id"),
    )
    op.create_table(
        "web_sessions",
        sa.Column("id_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("account_id", sa.Integer, nullable=True),
        sa.Column("actor_name", sa.String(200), nullable=True),
        sa.Column("user_id", sa.Integer, nullable=True),
        sa.Column("csrf_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("seen_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account_id"], ["accounts.id"], name="fk_web_sessions_account_id_accounts"
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_web_sessions_user_id_users"),
        sa.PrimaryKeyConstraint("id_sha256", name="pk_web_sessions"),
    )
    op.create_index("ix_web_sessions_account_id", "web_sessions", ["account_id"])
    op.create_index("ix_web_sessions_expires_at", "web_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("web_sessions")
    op.drop_table("accounts")
