"""``build_accounts``: the accounts parts from the ``accounts:`` configuration section."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from fairgate.accounts.guesses import Guesses
from fairgate.accounts.notices import SignUpNotifier, Unnotified
from fairgate.accounts.passwords import Passwords
from fairgate.accounts.service import Accounts
from fairgate.accounts.sessions import Sessions
from fairgate.accounts.verifier import Verifier
from fairgate.config.web_accounts import WebAccounts
from fairgate.core.clock import Clock
from fairgate.limits import CounterStore
from fairgate.store import Store
from fairgate.tenancy import Tenancy

__all__ = ["AccountsParts", "build_accounts"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AccountsParts:
    """What a gateway holds of the accounts package; ``aclose`` at shutdown."""

    accounts: Accounts
    sessions: Sessions
    verifier: Verifier

    async def prune_sessions(self, every: float) -> None:
        """Delete dead sessions every ``every`` seconds (a Gateway task; never returns). A
        store that does not answer is logged and tried again next time."""
        while True:
            try:
                removed = await self.sessions.prune()
            except Exception as exc:
                log.warning("web sessions not pruned (%s)", type(exc).__name__)
            else:
                if removed:
                    log.info("web sessions: %d dead sessions pruned", removed)
            await asyncio.sleep(every)

    async def aclose(self) -> None:
        await self.accounts.close()
        self.verifier.close()


def build_accounts(
    settings: WebAccounts,
    store: Store,
    tenancy: Tenancy,
    clock: Clock,
    *,
    state: CounterStore,
    fail_open: bool = False,
    notifier: SignUpNotifier | None = None,
) -> AccountsParts:
    """Passwords, the bounded verifier, sessions and the service, as configured; sign-in
    guesses are counted in ``state`` (the limiter's back end: memory or Redis)."""
    passwords = Passwords(
        memory_kib=settings.argon2_memory_kib,
        iterations=settings.argon2_iterations,
        parallelism=settings.argon2_parallelism,
    )
    verifier = Verifier(passwords, threads=settings.verify_threads, queue=settings.verify_queue)
    sessions = Sessions(
        store, idle=settings.session_idle, lifetime=settings.session_lifetime, clock=clock
    )
    counter = Guesses(
        state,
        per_address=settings.guesses_per_address,
        per_network=settings.guesses_per_network,
        window=settings.guess_window,
        clock=clock,
        fail_open=fail_open,
        per_signup_network=settings.signups_per_network,
    )
    accounts = Accounts(
        store, tenancy, sessions, verifier, counter, notifier or Unnotified(), clock
    )
    return AccountsParts(accounts=accounts, sessions=sessions, verifier=verifier)
