"""``Account``: a person's web account as the rest of the gateway sees it (never its hash)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from fairgate.store.accounts import AccountRow

__all__ = ["Account", "AccountState"]

AccountState = Literal["pending", "active", "suspended"]


@dataclass(frozen=True, slots=True)
class Account:
    """``user_id`` and ``team``: the tenancy user and team it was approved into (None while
    pending). The user is named after ``email``."""

    id: int
    email: str
    state: AccountState
    user_id: int | None
    team: str | None
    created_at: datetime

    @classmethod
    def of(cls, row: AccountRow) -> Account:
        return cls(
            id=row.id,
            email=row.email,
            state=row.state,
            user_id=row.user_id,
            team=row.team,
            created_at=row.created_at,
        )
