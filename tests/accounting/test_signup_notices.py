"""Pending sign-up notices: a real webhook receiver and SMTP relay, SQLite and PostgreSQL.

Once per account (two gateways, a restart), retried at the next start when every
channel failed, never a password or a key in the message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest

from accounting.test_alerts import PASSWORD as SMTP_PASSWORD
from accounting.test_alerts import Inbox, Receiver, inbox, receiver
from fairgate.accounting import AlertDelivery, SignUpNotices, SmtpTarget, WebhookTarget
from fairgate.accounts import build_accounts
from fairgate.config.web_accounts import WebAccounts
from fairgate.state import MemoryCounterStore
from fairgate.store import Store
from fairgate.tenancy import Tenancy
from store.backends import FakeClock

__all__ = ["inbox", "receiver"]

SECRET = "correct horse battery staple"


@pytest.fixture
async def opened() -> AsyncIterator[list[AlertDelivery]]:
    """Every delivery a test opens, closed at its end (their HTTP sessions)."""
    deliveries: list[AlertDelivery] = []
    try:
        yield deliveries
    finally:
        for delivery in deliveries:
            await delivery.close()


def _notices(store: Store, receiver: Receiver, opened: list[AlertDelivery]) -> SignUpNotices:
    delivery = AlertDelivery(webhook=WebhookTarget(receiver.url), smtp=None)
    opened.append(delivery)
    return SignUpNotices(store, delivery, FakeClock())


async def _sign_up(store: Store, notices: SignUpNotices, *emails: str) -> None:
    """Sign up through the Accounts service, as the page does, and wait for its notices."""
    parts = build_accounts(
        WebAccounts(), store, Tenancy(store), FakeClock(), state=MemoryCounterStore(),
        notifier=notices,
    )  # fmt: skip
    try:
        for email in emails:
            await parts.accounts.sign_up(email, SECRET)
    finally:
        await parts.aclose()


async def test_a_new_sign_up_is_told_once_and_a_known_address_tells_nothing(
    store: Store, receiver: Receiver, opened: list[AlertDelivery]
) -> None:
    notices = _notices(store, receiver, opened)
    await _sign_up(store, notices, "alice@example.org", "alice@example.org", "ALICE@example.org")
    assert len(receiver.posts) == 1
    headers, body = receiver.posts[0]
    assert body["type"] == "account.pending"
    assert body["account"]["email"] == "alice@example.org"
    assert body["approve"] == "fairgate accounts approve alice@example.org --team TEAM"
    text = orjson.dumps(body).decode()
    assert SECRET not in text and "argon2" not in text and "Authorization" not in headers


async def test_two_gateways_and_a_restart_send_one_notice(
    store: Store, receiver: Receiver, opened: list[AlertDelivery]
) -> None:
    first = _notices(store, receiver, opened)
    await _sign_up(store, first, "alice@example.org")
    second = _notices(store, receiver, opened)  # another gateway on the same store
    await second.resend_missed()
    restarted = _notices(store, receiver, opened)
    await restarted.resend_missed()
    assert len(receiver.posts) == 1


async def test_every_channel_failing_gives_the_claim_back_for_the_next_start(
    store: Store, receiver: Receiver, opened: list[AlertDelivery]
) -> None:
    receiver.status = 500
    await _sign_up(store, _notices(store, receiver, opened), "alice@example.org")
    assert len(receiver.posts) == 1
    receiver.status = 200
    await _notices(store, receiver, opened).resend_missed()
    assert len(receiver.posts) == 2
    await _notices(store, receiver, opened).resend_missed()
    assert len(receiver.posts) == 2


async def test_a_channel_configured_later_hears_of_a_pending_account_once(
    store: Store, receiver: Receiver, opened: list[AlertDelivery]
) -> None:
    silent = SignUpNotices(store, AlertDelivery(webhook=None, smtp=None), FakeClock())
    await _sign_up(store, silent, "alice@example.org")  # no channel: nothing claimed
    await _notices(store, receiver, opened).resend_missed()
    assert len(receiver.posts) == 1  # a channel configured later hears of it once


async def test_the_e_mail_names_the_address_and_the_command_and_no_secret(
    store: Store, inbox: Inbox
) -> None:
    delivery = AlertDelivery(
        webhook=None,
        smtp=SmtpTarget(
            "127.0.0.1",
            port=inbox.port,
            sender="gw@example.org",
            recipients=("ops@example.org",),
            username="gw",
            password=SMTP_PASSWORD,
        ),
    )
    await _sign_up(store, SignUpNotices(store, delivery, FakeClock()), "bob@example.org")
    await delivery.close()
    [mail] = inbox.mails
    content = mail.content.decode() if isinstance(mail.content, bytes) else str(mail.content)
    assert "Subject: fairgate: bob@example.org waits for approval" in content
    assert "fairgate accounts approve bob@example.org --team TEAM" in content
    assert SECRET not in content and SMTP_PASSWORD not in content


@pytest.mark.parametrize("status", [200])
async def test_a_store_row_keeps_the_mark(
    store: Store, receiver: Receiver, opened: list[AlertDelivery], status: int
) -> None:
    from sqlalchemy import select

    from fairgate.store.tables import accounts

    await _sign_up(store, _notices(store, receiver, opened), "alice@example.org")
    async with store.read() as conn:
        marked = (await conn.execute(select(accounts.c.notified_at))).scalar_one()
    assert marked is not None
