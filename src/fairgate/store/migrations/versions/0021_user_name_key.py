"""Users: a name unique in any case, held by the store (``users.name_key``).

The check before an insert (``store.users.namesake``) cannot stop two creations at
once (``alice`` and ``Alice``), nor did SCIM run it; ``name_key``, the lower-cased
name under a unique constraint, refuses the second write whatever path it takes.

A store may already hold case variants (made before this revision). They are kept
as they are: in each group of names equal in any case the oldest user (lowest id)
gets the key, the others none (NULL, which a unique constraint never compares), so
the upgrade never fails on them; ``fairgate users list`` still shows them, and a new
user of any of their cases is refused as before.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("name_key", sa.String(128), nullable=True))
    op.execute(
        "UPDATE users SET name_key = lower(name)"
        " WHERE id IN (SELECT min(id) FROM users GROUP BY lower(name))"
    )
    with op.batch_alter_table("users") as batch:
        batch.create_unique_constraint("uq_users_name_key", ["name_key"])


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint("uq_users_name_key", type_="unique")
        batch.drop_column("name_key")
