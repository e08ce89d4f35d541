"""Audit chain: each event sealed with the hash of the one before it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01

Events written before this revision are chained here, in id order, from the
genesis hash: ``seq`` 1, 2, 3 … and each ``hash`` computed exactly as an append
computes it (``fairgate.store.audit_chain``). The chain then vouches for them
only from this migration on: a change made to them before it cannot show.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from fairgate.store.audit_chain import GENESIS, event_hash
from fairgate.store.timestamp import UtcDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_HASH = sa.LargeBinary(32)


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("seq", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("prev_hash", _HASH, nullable=True))
        batch.add_column(sa.Column("hash", _HASH, nullable=True))
    _chain_existing()
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column("seq", existing_type=sa.BigInteger, nullable=False)
        batch.alter_column("prev_hash", existing_type=_HASH, nullable=False)
        batch.alter_column("hash", existing_type=_HASH, nullable=False)
        batch.create_unique_constraint("uq_audit_events_seq", ["seq"])


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_constraint("uq_audit_events_seq", type_="unique")
        for name in ("hash", "prev_hash", "seq"):
            batch.drop_column(name)


def _chain_existing() -> None:
    events = sa.table(
        "audit_events",
        sa.column("id", sa.BigInteger),
        sa.column("at", UtcDateTime()),
        sa.column("actor", sa.String),
        sa.column("action", sa.String),
        sa.column("target", sa.String),
        sa.column("org_id", sa.Integer),
        sa.column("team_id", sa.Integer),
        sa.column("remote", sa.String),
        sa.column("detail", sa.JSON(none_as_null=True)),
        sa.column("seq", sa.BigInteger),
        sa.column("prev_hash", _HASH),
        sa.column("hash", _HASH),
    )
    bind = op.get_bind()
    rows = bind.execute(sa.select(events).order_by(events.c.id)).all()
    previous = GENESIS
    for seq, row in enumerate(rows, start=1):
        sealed = event_hash(
            seq=seq,
            at=row.at,
            actor=row.actor,
            action=row.action,
            target=row.target,
            org_id=row.org_id,
            team_id=row.team_id,
            remote=row.remote,
            detail=row.detail,
            prev_hash=previous,
        )
        bind.execute(
            events.update()
            .where(events.c.id == row.id)
            .values(seq=seq, prev_hash=previous, hash=sealed)
        )
        previous = sealed
