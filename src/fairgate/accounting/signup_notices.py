"""Pending sign-ups told to operators through the alert channels: once per account.

    notices = SignUpNotices(store, alerter.delivery, clock)
    await notices.pending_sign_up(account)     # claims the account's mark, then sends
    await notices.resend_missed()              # at start: pending accounts never told

The once-only mark is the account's ``notified_at`` (``fairgate.store.accounts``),
claimed in the store before anything is sent, so two gateways never both send
and a restart sends nothing again. When every channel fails the claim is given
back and the next start of a gateway tries again. The message names the address
and the command that approves it; it never carries a password or a key (an
account has no key until an operator approves it and its owner makes one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from fairgate.accounting.delivery import AlertDelivery
from fairgate.core.clock import Clock
from fairgate.store import Store, from_unix
from fairgate.store import accounts as rows

__all__ = ["PendingAccount", "SignUpNotice", "SignUpNotices"]

log = logging.getLogger("fairgate.alerts")


class PendingAccount(Protocol):
    """What a notice needs of an account (``fairgate.accounts.Account``)."""

    @property
    def id(self) -> int: ...

    @property
    def email(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...


class SignUpNotice:
    """The message for one pending sign-up (``AlertMessage``)."""

    def __init__(self, account: PendingAccount, at: float) -> None:
        self.account = account
        self.at = at

    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body (docs/alerts.md)."""
        return {
            "type": "account.pending",
            "id": f"account:{self.account.id}",
            "message": self.summary(),
            "account": {
                "email": self.account.email,
                "created_at": self.account.created_at.isoformat().replace("+00:00", "Z"),
            },
            "approve": self.command(),
            "timestamp": from_unix(self.at).isoformat().replace("+00:00", "Z"),
        }

    def command(self) -> str:
        return f"fairgate accounts approve {self.account.email} --team TEAM"

    def summary(self) -> str:
        return f"{self.account.email} signed up and waits for approval"

    def subject(self) -> str:
        return f"fairgate: {self.account.email} waits for approval"

    def body(self) -> str:
        return (
            f"{self.summary()}.\n\n"
            f"Approve into a team:  {self.command()} [--role member]\n"
            "Or refuse:            fairgate accounts delete "
            f"{self.account.email}\n\n"
            "Until approved the account can do nothing. This notice is sent once per account;"
            " no key is ever sent by e-mail.\n"
        )


def _ignore(_label: str) -> None:
    return None


class SignUpNotices:
    """Sends each pending sign-up's notice once (``fairgate.accounts.SignUpNotifier``).

    ``on_sent(channel)`` / ``on_failed(channel)`` count deliveries, as the
    soft-limit alerts do. With no channel configured nothing is claimed, so a
    channel configured later still hears of accounts pending at its first start.
    """

    def __init__(
        self,
        store: Store,
        delivery: AlertDelivery,
        clock: Clock,
        *,
        on_sent: Callable[[str], None] | None = None,
        on_failed: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._delivery = delivery
        self._clock = clock
        self._on_sent = on_sent or _ignore
        self._on_failed = on_failed or _ignore

    async def pending_sign_up(self, account: PendingAccount) -> None:
        """Claim the account's notice and send it; logs, never raises for a channel."""
        if not self._delivery.enabled:
            return
        now = self._clock.wall()
        async with self._store.write() as conn:
            claimed = await rows.claim_notice(conn, account.id, from_unix(now))
        if not claimed:
            return
        results = await self._delivery.send(SignUpNotice(account, now))
        for channel, ok in results.items():
            (self._on_sent if ok else self._on_failed)(channel)
        if any(results.values()):
            log.info("alerts: pending sign-up of account %d notified", account.id)
            return
        async with self._store.write() as conn:
            await rows.release_notice(conn, account.id)
        log.error(
            "alerts: the pending sign-up of account %d failed on every channel;"
            " the next start retries",
            account.id,
        )

    async def resend_missed(self) -> None:
        """At start: send the notice of every pending account never told. A store that does
        not answer is logged; the next start tries again."""
        if not self._delivery.enabled:
            return
        try:
            async with self._store.read() as conn:
                missed = await rows.unnotified(conn)
            for row in missed:
                await self.pending_sign_up(row)
        except Exception as exc:
            log.error("alerts: pending sign-ups not notified at start (%s)", type(exc).__name__)
            return
        if missed:
            log.info("alerts: %d pending sign-ups notified at start", len(missed))
