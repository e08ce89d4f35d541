"""Team origin: whether the configuration sync created the team (only such a team moves).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Existing teams are marked from the audit trail: a team whose ``team.created``
event was written by the configuration sync (``system:config``) was created by
the configuration; every other team was created through the admin API or CLI.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(
            sa.Column("from_config", sa.Boolean, nullable=False, server_default=sa.false())
        )
    teams = sa.table("teams", sa.column("id", sa.Integer), sa.column("from_config", sa.Boolean))
    events = sa.table(
        "audit_events",
        sa.column("team_id", sa.Integer),
        sa.column("action", sa.String),
        sa.column("actor", sa.String),
    )
    created_by_config = sa.select(events.c.team_id).where(
        events.c.action == "team.created", events.c.actor == "system:config"
    )
    op.execute(
        teams.update().where(teams.c.id.in_(created_by_config)).values(from_config=sa.true())
    )


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("from_config")
