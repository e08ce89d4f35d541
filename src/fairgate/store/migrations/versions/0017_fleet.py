"""The fleet: the control plane's nodes and the replicas it placed on them.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fleet_nodes",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("inventory", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cordoned", sa.Boolean(), nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.Column("address", sa.String(256), nullable=False),
        sa.Column("desired_version", sa.BigInteger(), nullable=False),
        sa.Column("allocation_ends_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_fleet_nodes"),
    )
    op.create_table(
        "fleet_replicas",
        sa.Column("id", sa.String(128), nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("desired_version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_fleet_replicas"),
        sa.ForeignKeyConstraint(
            ["node"], ["fleet_nodes.name"], name="fk_fleet_replicas_node_fleet_nodes"
        ),
        sa.UniqueConstraint("node", "port", name="uq_fleet_replicas_node_port"),
    )
    op.create_index("ix_fleet_replicas_model", "fleet_replicas", ["model"])


def downgrade() -> None:
    op.drop_index("ix_fleet_replicas_model", table_name="fleet_replicas")
    op.drop_table("fleet_replicas")
    op.drop_table("fleet_nodes")
