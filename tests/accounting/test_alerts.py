"""Soft-limit alerts: a real webhook receiver and a real SMTP relay, on SQLite and PostgreSQL.

One alert per budget and period: across two gateways sharing the store, across a
restart, retried on the next crossing when every channel failed; never a token
in the logs, never an exception on the request path.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from fairgate.accounting import Alerter, SmtpTarget, WebhookTarget
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget
from fairgate.store import Store
from fairgate.store import alert_marks as marks
from fairgate.store.timestamp import from_unix
from store.backends import FakeClock

DEADLINE = 30.0  # seconds: generous bound for anything that waits on a send
TOKEN = "whk-7f3a9c1e5d2b8046"
PASSWORD = "smtp-pw-4b6d8e0f2a1c"
OCTOBER_END = 1_761_955_200.0  # 2025-11-01T00:00:00Z
NOVEMBER_END = 1_764_547_200.0  # 2025-12-01T00:00:00Z
HOOK = "http://127.0.0.1:9/hook"  # never reached

TEAM = Budget(
    "team",
    "lab-nlp",
    None,
    "month",
    max=Money.from_units(100),
    soft=Money.from_units(80),
)
KEY_BUDGET = Budget(
    "key", "k1", "llama-3.3-70b", "day", max=Money.from_units(2), soft=Money.from_units("1.5")
)


@dataclass
class Receiver:
    """A webhook endpoint: records every POST, answers ``status``, may hold answers."""

    url: str = ""
    status: int = 200
    posts: list[tuple[dict[str, str], Any]] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.posts.append((dict(request.headers), await request.json()))
        await self.gate.wait()
        return web.json_response({"ok": self.status < 300}, status=self.status)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    hook = Receiver()
    hook.gate.set()
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    runner = web.AppRunner(app, shutdown_timeout=5.0, access_log=None)  # its log shows URLs
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    hook.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield hook
    finally:
        hook.gate.set()
        await runner.cleanup()


@dataclass
class Inbox:
    """An SMTP relay's mailbox: the envelopes it accepted and the logins it saw."""

    port: int = 0
    mails: list[Envelope] = field(default_factory=list)
    logins: list[tuple[bytes, bytes]] = field(default_factory=list)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.mails.append(envelope)
        return "250 Message accepted"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.logins.append((data.login, data.password))
        return AuthResult(success=data.password == PASSWORD.encode())


@pytest.fixture
async def inbox() -> AsyncIterator[Inbox]:
    box = Inbox()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(
            box, hostname="relay.test", authenticator=box.authenticate, auth_require_tls=False
        ),
        "127.0.0.1",
        0,
    )
    box.port = server.sockets[0].getsockname()[1]
    try:
        yield box
    finally:
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    """A local port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Calls:
    def __init__(self) -> None:
        self.labels: list[str] = []

    def __call__(self, label: str) -> None:
        self.labels.append(label)


def alerter(
    store: Store,
    *,
    webhook: WebhookTarget | None = None,
    smtp: SmtpTarget | None = None,
    clock: FakeClock | None = None,
    **kwargs: Any,
) -> Alerter:
    return Alerter(store, webhook=webhook, smtp=smtp, clock=clock or FakeClock(), **kwargs)


def cross(target: Alerter, budget: Budget = TEAM, label: str = "2025-10") -> None:
    end = OCTOBER_END if label == "2025-10" else NOVEMBER_END
    target.soft_limit_crossed(budget, label, end, Money.from_units("81.25"), Money.from_units(110))


async def mark(
    store: Store, budget: Budget = TEAM, label: str = "2025-10"
) -> marks.AlertMark | None:
    async with store.read() as conn:
        return await marks.find(conn, budget.counter_key(label))


async def test_the_webhook_gets_one_json_post_with_the_bearer_token(
    store: Store, receiver: Receiver
) -> None:
    sent = Calls()
    clock = FakeClock(1_760_443_200.0)  # 2025-10-14T12:00:00Z
    gateway = alerter(
        store, webhook=WebhookTarget(receiver.url, token=TOKEN), clock=clock, on_sent=sent
    )
    gateway.start()
    cross(gateway)
    cross(gateway)  # the same budget and period again: nothing more
    assert await gateway.stop(timeout=DEADLINE)

    assert len(receiver.posts) == 1
    headers, body = receiver.posts[0]
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"].startswith("application/json")
    assert body == {
        "type": "budget.soft_limit",
        "id": "budget:team:lab-nlp:*:month:2025-10",
        "message": body["message"],
        "budget": {
            "scope_kind": "team",
            "scope": "lab-nlp",
            "model": None,
            "period": "month",
            "label": "2025-10",
            "period_end": "2025-11-01T00:00:00Z",
        },
        "soft": {"units": "80", "micro": 80_000_000},
        "cap": {"units": "110", "micro": 110_000_000},
        "spent": {"units": "81.25", "micro": 81_250_000},
        "timestamp": "2025-10-14T12:00:00Z",
    }
    assert "team 'lab-nlp'" in body["message"] and "monthly" in body["message"]
    assert sent.labels == ["webhook"]
    stored = await mark(store)
    assert stored is not None and stored.sent_at is not None
    assert stored.channels == {"webhook": "sent"}


async def test_without_a_token_no_authorization_header_is_sent(
    store: Store, receiver: Receiver
) -> None:
    gateway = alerter(store, webhook=WebhookTarget(receiver.url))
    cross(gateway, KEY_BUDGET, "2025-10-14")
    assert await gateway.stop(timeout=DEADLINE)
    ((headers, body),) = receiver.posts
    assert "Authorization" not in headers
    assert body["budget"]["model"] == "llama-3.3-70b"
    assert body["soft"] == {"units": "1.5", "micro": 1_500_000}


async def test_an_email_goes_through_the_relay_with_a_login(store: Store, inbox: Inbox) -> None:
    smtp = SmtpTarget(
        "127.0.0.1",
        sender="gateway@example.org",
        recipients=("ops@example.org", "finance@example.org"),
        port=inbox.port,
        username="gateway",
        password=PASSWORD,
    )
    sent = Calls()
    gateway = alerter(store, smtp=smtp, on_sent=sent)
    cross(gateway)
    assert await gateway.stop(timeout=DEADLINE)

    assert inbox.logins == [(b"gateway", PASSWORD.encode())]
    (mail,) = inbox.mails
    assert mail.mail_from == "gateway@example.org"
    assert sorted(mail.rcpt_tos) == ["finance@example.org", "ops@example.org"]
    text = mail.content.decode() if isinstance(mail.content, bytes) else str(mail.content)
    assert "Subject: fairgate: soft limit reached by team 'lab-nlp' (2025-10)" in text
    assert "Spent:   81.25" in text and "Soft:    80" in text and "Cap:     110" in text
    assert sent.labels == ["smtp"]
    assert PASSWORD not in repr(smtp)


async def test_two_gateways_on_one_store_send_one_alert(
    store: Store, receiver: Receiver, inbox: Inbox
) -> None:
    smtp = SmtpTarget("127.0.0.1", "gw@example.org", ("ops@example.org",), port=inbox.port)
    webhook = WebhookTarget(receiver.url, token=TOKEN)
    first = alerter(store, webhook=webhook, smtp=smtp)
    second = alerter(store, webhook=webhook, smtp=smtp)
    for _ in range(3):
        cross(first)
        cross(second)
    assert await first.stop(timeout=DEADLINE)
    assert await second.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 1
    assert len(inbox.mails) == 1


async def test_a_restarted_gateway_does_not_send_again(store: Store, receiver: Receiver) -> None:
    webhook = WebhookTarget(receiver.url)
    before = alerter(store, webhook=webhook)
    cross(before)
    assert await before.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 1

    after = alerter(store, webhook=webhook)  # a new process, the same store
    after.start()
    cross(after)
    assert await after.wait(timeout=DEADLINE)
    assert len(receiver.posts) == 1
    cross(after, label="2025-11")  # the next period is another alert
    assert await after.stop(timeout=DEADLINE)
    assert [body["budget"]["label"] for _, body in receiver.posts] == ["2025-10", "2025-11"]


async def test_a_channel_down_gives_the_mark_back_and_a_request_a_minute_later_sends(
    store: Store, receiver: Receiver
) -> None:
    failed, sent = Calls(), Calls()
    clock = FakeClock()
    gateway = alerter(
        store, webhook=WebhookTarget(receiver.url), clock=clock, on_failed=failed, on_sent=sent
    )
    receiver.status = 503
    cross(gateway)
    assert await gateway.wait(timeout=DEADLINE)
    assert len(receiver.posts) == 1 and failed.labels == ["webhook"]
    assert await mark(store) is None  # given back

    receiver.status = 200
    cross(gateway)  # every request past the soft limit reports it: not each one a send
    assert await gateway.wait(timeout=DEADLINE)
    assert len(receiver.posts) == 1
    clock.advance(60)
    cross(gateway)  # a minute later, same process
    assert await gateway.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 2 and sent.labels == ["webhook"]
    stored = await mark(store)
    assert stored is not None and stored.sent_at is not None


async def test_an_unreachable_relay_is_retried_by_another_gateway(
    store: Store, inbox: Inbox
) -> None:
    down = SmtpTarget("127.0.0.1", "gw@example.org", ("ops@example.org",), port=closed_port())
    failing = alerter(store, smtp=down)
    cross(failing)
    assert await failing.stop(timeout=DEADLINE)
    assert await mark(store) is None

    up = SmtpTarget("127.0.0.1", "gw@example.org", ("ops@example.org",), port=inbox.port)
    other = alerter(store, smtp=up)
    cross(other)
    assert await other.stop(timeout=DEADLINE)
    assert len(inbox.mails) == 1


async def test_a_claim_left_unsent_by_a_dead_gateway_is_taken_over_by_a_running_one(
    store: Store, receiver: Receiver
) -> None:
    clock = FakeClock()
    async with store.write() as conn:  # a gateway claimed the alert, then died
        assert await marks.claim(
            conn,
            TEAM.counter_key("2025-10"),
            now=from_unix(clock.wall()),
            period_end=from_unix(OCTOBER_END),
            stale_after=600,
        )
    gateway = alerter(store, webhook=WebhookTarget(receiver.url), clock=clock)
    cross(gateway)  # claimed elsewhere, and not stale yet: nothing
    assert await gateway.wait(timeout=DEADLINE)
    clock.advance(300)
    cross(gateway)
    assert await gateway.wait(timeout=DEADLINE)
    assert receiver.posts == []
    clock.advance(301)  # the claim is stale: the next request past the soft limit sends
    cross(gateway)
    assert await gateway.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 1
    stored = await mark(store)
    assert stored is not None and stored.sent_at is not None


async def test_one_channel_delivering_is_enough(store: Store, receiver: Receiver) -> None:
    down = SmtpTarget("127.0.0.1", "gw@example.org", ("ops@example.org",), port=closed_port())
    failed = Calls()
    gateway = alerter(store, webhook=WebhookTarget(receiver.url), smtp=down, on_failed=failed)
    cross(gateway)
    assert await gateway.stop(timeout=DEADLINE)
    assert failed.labels == ["smtp"]
    stored = await mark(store)
    assert stored is not None and stored.channels == {"webhook": "sent", "smtp": "failed"}

    again = alerter(store, webhook=WebhookTarget(receiver.url), smtp=down)
    cross(again)
    assert await again.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 1


async def test_the_token_never_appears_in_the_logs(
    store: Store, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Refused (401), then unreachable, then delivered: every path logs something.
    receiver.status = 401
    secret_url = f"{receiver.url}?token={TOKEN}"
    clock = FakeClock()
    gateway = alerter(store, webhook=WebhookTarget(secret_url, token=TOKEN), clock=clock)
    cross(gateway)
    assert await gateway.wait(timeout=DEADLINE)
    unreachable = f"http://127.0.0.1:{closed_port()}/hook?token={TOKEN}"
    lost = alerter(store, webhook=WebhookTarget(unreachable, token=TOKEN, timeout=5.0))
    cross(lost)
    assert await lost.stop(timeout=DEADLINE)
    receiver.status = 200
    clock.advance(60)
    cross(gateway)
    assert await gateway.stop(timeout=DEADLINE)

    assert len(receiver.posts) == 2
    assert "HTTP 401" in caplog.text and "failed on every channel" in caplog.text
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(WebhookTarget(receiver.url, token=TOKEN))


async def test_a_store_down_loses_nothing_for_good_and_never_raises(
    store: Store, receiver: Receiver
) -> None:
    dropped = Calls()
    clock = FakeClock()
    gateway = alerter(store, webhook=WebhookTarget(receiver.url), clock=clock, on_dropped=dropped)
    await store.close()
    cross(gateway)  # returns at once, raises nothing
    assert await gateway.wait(timeout=DEADLINE)
    assert dropped.labels == ["store_unavailable"] and receiver.posts == []

    await store.connect()
    clock.advance(60)
    cross(gateway)  # a minute later, a request past the soft limit claims and sends
    assert await gateway.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 1


async def test_pending_alerts_are_bounded(store: Store, receiver: Receiver) -> None:
    dropped = Calls()
    clock = FakeClock()
    receiver.gate.clear()  # the receiver holds its answers
    gateway = alerter(
        store, webhook=WebhookTarget(receiver.url), capacity=1, clock=clock, on_dropped=dropped
    )
    cross(gateway)
    cross(gateway, KEY_BUDGET, "2025-10-14")
    cross(gateway, KEY_BUDGET, "2025-10-14")  # the next request past it: not dropped again
    assert dropped.labels == ["queue_full"] and gateway.pending == 1
    receiver.gate.set()
    assert await gateway.wait(timeout=DEADLINE)
    clock.advance(60)
    cross(gateway, KEY_BUDGET, "2025-10-14")  # a minute later: sent now
    assert await gateway.stop(timeout=DEADLINE)
    assert len(receiver.posts) == 2
    cross(gateway, KEY_BUDGET, "2025-10-15")  # after stop: dropped and counted
    assert dropped.labels == ["queue_full", "stopped"]


async def test_stop_waits_for_the_alert_in_flight(store: Store, receiver: Receiver) -> None:
    receiver.gate.clear()
    gateway = alerter(store, webhook=WebhookTarget(receiver.url))
    cross(gateway)
    stopping = asyncio.create_task(gateway.stop(timeout=DEADLINE))
    while not receiver.posts:
        await asyncio.sleep(0.01)
    assert not stopping.done()
    receiver.gate.set()
    assert await stopping
    stored = await mark(store)
    assert stored is not None and stored.sent_at is not None


async def test_with_no_channel_nothing_happens(store: Store) -> None:
    gateway = alerter(store)
    assert not gateway.enabled
    gateway.start()
    cross(gateway)
    assert gateway.pending == 0
    assert await gateway.stop(timeout=DEADLINE)
    assert await mark(store) is None


def test_a_call_off_the_event_loop_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = alerter(Store(f"sqlite:///{tmp_path}/never.db"), webhook=WebhookTarget(HOOK))
    cross(gateway)
    assert gateway.pending == 0
    assert "could not be scheduled" in caplog.text


async def test_a_webhook_token_rotated_in_a_vault_is_sent_from_the_next_alert(
    store: Store, receiver: Receiver
) -> None:
    clock = FakeClock(1_760_443_200.0)  # 2025-10-14T12:00:00Z
    gateway = alerter(store, webhook=WebhookTarget(receiver.url, token=TOKEN), clock=clock)
    gateway.use_webhook_token("rotated-webhook-token")
    gateway.start()
    cross(gateway)
    assert await gateway.stop(timeout=DEADLINE)
    ((headers, _),) = receiver.posts
    assert headers["Authorization"] == "Bearer rotated-webhook-token"
