"""Fixtures of the accounts suite: the accounts parts over ``store`` (SQLite and PostgreSQL).

One organisation ``lab`` with teams ``lab-nlp`` and ``lab-cv``; the real argon2id
at OWASP's parameters; a test clock shared by sessions and guess counters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from fairgate.accounts import AccountsParts, build_accounts
from fairgate.config.web_accounts import WebAccounts
from fairgate.state import MemoryCounterStore
from fairgate.store import Store
from fairgate.tenancy import Actor, Tenancy
from store.backends import FakeClock, pg_store_url, sqlite_template, store, store_url

__all__ = [
    "OPERATOR",
    "clock",
    "parts",
    "pg_store_url",
    "sqlite_template",
    "store",
    "store_url",
    "tenancy",
]

OPERATOR = Actor.operator("test")
SETTINGS = WebAccounts(guesses_per_address=3, guesses_per_network=5)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def tenancy(store: Store, clock: FakeClock) -> Tenancy:
    tenancy = Tenancy(store, clock=clock)
    await tenancy.orgs.create(OPERATOR, "lab")
    await tenancy.teams.create(OPERATOR, org="lab", name="lab-nlp")
    await tenancy.teams.create(OPERATOR, org="lab", name="lab-cv")
    return tenancy


@pytest.fixture
async def parts(store: Store, tenancy: Tenancy, clock: FakeClock) -> AsyncIterator[AccountsParts]:
    built = build_accounts(SETTINGS, store, tenancy, clock, state=MemoryCounterStore())
    try:
        yield built
    finally:
        await built.aclose()
