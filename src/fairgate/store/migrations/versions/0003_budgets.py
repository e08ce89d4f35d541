"""Budgets: one cap per scope, model and period, and their temporary increases.

Revision ID: 0003
Revises: 0002
Create Date: 2025-03-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("scope_kind", sa.String(8), nullable=False),
        sa.Column("scope", sa.String(300), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("period", sa.String(8), nullable=False),
        sa.Column("max_micro", sa.BigInteger, nullable=False),
        sa.Column("soft_micro", sa.BigInteger, nullable=True),
        sa.Column("org_id", sa.Integer, nullable=True),
        sa.Column("team_id", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_budgets"),
        sa.UniqueConstraint(
            "scope_kind",
            "scope",
            "model",
            "period",
            name="uq_budgets_scope_kind_scope_model_period",
        ),
    )
    op.create_index("ix_budgets_org_id_team_id", "budgets", ["org_id", "team_id"])
    op.create_table(
        "budget_increases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("budget_id", sa.String(26), nullable=False),
        sa.Column("amount_micro", sa.BigInteger, nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_budget_increases"),
        sa.ForeignKeyConstraint(
            ["budget_id"], ["budgets.id"], name="fk_budget_increases_budget_id_budgets"
        ),
    )
    op.create_index("ix_budget_increases_budget_id", "budget_increases", ["budget_id"])


def downgrade() -> None:
    op.drop_table("budget_increases")
    op.drop_table("budgets")
