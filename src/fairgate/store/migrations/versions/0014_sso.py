"""Single sign-on: what an SSO admin session keeps, and the logins in progress.

``web_sessions`` gains ``sso_roles`` (the role bindings the person's claims gave at
sign-in, by scope name) and ``id_token_hint`` (the provider's ID token, sent back at
logout); ``sso_logins`` holds each login between the redirect to the provider and
its callback, so any replica can finish it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fairgate.store.timestamp import UtcDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("web_sessions") as batch:
        batch.add_column(sa.Column("sso_roles", sa.JSON(none_as_null=True), nullable=True))
        batch.add_column(sa.Column("id_token_hint", sa.Text(), nullable=True))
    op.create_table(
        "sso_logins",
        sa.Column("id_sha256", sa.LargeBinary(32), nullable=False),
        sa.Column("state", sa.String(64), nullable=False),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("code_verifier", sa.String(128), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id_sha256", name="pk_sso_logins"),
    )
    op.create_index("ix_sso_logins_expires_at", "sso_logins", ["expires_at"])


def downgrade() -> None:
    op.drop_table("sso_logins")
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_column("id_token_hint")
        batch.drop_column("sso_roles")
