"""Alert delivery: one message to a webhook and/or through an SMTP relay, never raising.

    delivery = AlertDelivery(webhook=WebhookTarget(url, token="…"), smtp=SmtpTarget(…))
    results = await delivery.send(message)     # {"webhook": True, "smtp": False}
    await delivery.close()

The kinds of message (a budget's soft limit, ``fairgate.accounting.alerts``; a
pending sign-up, ``fairgate.accounting.signup_notices``) decide what is sent and
when, and keep their own once-only marks; this module only carries them. A
failure is logged without the token, the password or the webhook URL (which may
hold credentials) and reported as False for its channel; nothing is retried here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
import aiosmtplib

__all__ = ["AlertDelivery", "AlertMessage", "SmtpTarget", "WebhookTarget"]

log = logging.getLogger("fairgate.alerts")


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    """A JSON POST per alert to ``url``; ``token`` (if any) is sent as ``Authorization: Bearer``.

    ``timeout`` (seconds) bounds one POST. The token never appears in ``repr``.
    """

    url: str
    token: str | None = field(default=None, repr=False)
    timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class SmtpTarget:
    """An e-mail per alert through the relay at ``host``:``port``.

    ``starttls`` upgrades the connection (and fails when the relay cannot);
    ``username`` and ``password`` log in when both are set. ``timeout`` (seconds)
    bounds one delivery. The password never appears in ``repr``.
    """

    host: str
    sender: str
    recipients: tuple[str, ...]
    port: int = 25
    starttls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout: float = 10.0


class AlertMessage(Protocol):
    """One alert: the webhook's JSON ``payload()``, the e-mail's ``subject()`` (one line) and
    ``body()``, and ``at`` (Unix seconds) for the e-mail's Date. No secret in any of them."""

    @property
    def at(self) -> float: ...

    def payload(self) -> dict[str, Any]: ...

    def subject(self) -> str: ...

    def body(self) -> str: ...


class AlertDelivery:
    """The configured channels (None: not configured) and the one HTTP session they share."""

    def __init__(self, *, webhook: WebhookTarget | None, smtp: SmtpTarget | None) -> None:
        self._webhook = webhook
        self._smtp = smtp
        self._session: aiohttp.ClientSession | None = None
        self._secrets = tuple(
            s
            for s in (
                webhook.token if webhook else None,
                smtp.password if smtp else None,
                webhook.url if webhook else None,
            )
            if s
        )

    @property
    def enabled(self) -> bool:
        """True when at least one channel is configured."""
        return self._webhook is not None or self._smtp is not None

    def use_webhook_token(self, token: str) -> None:
        """Send ``token`` to the webhook from the next alert on (a token rotated in a vault);
        the old one stays scrubbed from logs too."""
        if self._webhook is not None:
            self._webhook = replace(self._webhook, token=token)
            self._secrets = (*self._secrets, token)

    def use_smtp_password(self, password: str) -> None:
        """Log in to the SMTP relay with ``password`` from the next alert on."""
        if self._smtp is not None:
            self._smtp = replace(self._smtp, password=password)
            self._secrets = (*self._secrets, password)

    async def send(self, message: AlertMessage) -> dict[str, bool]:
        """Send ``message`` on every channel at once; whether each delivered it."""
        channels: dict[str, Any] = {}
        if self._webhook is not None:
            channels["webhook"] = self._post(self._webhook, message)
        if self._smtp is not None:
            channels["smtp"] = self._mail(self._smtp, message)
        done = await asyncio.gather(*channels.values())
        return dict(zip(channels, done, strict=True))

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def reason(self, exc: BaseException) -> str:
        """A one-line description of ``exc`` with every configured secret redacted."""
        text = str(exc)
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        text = text.splitlines()[0][:200] if text.strip() else ""
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

    async def _post(self, target: WebhookTarget, message: AlertMessage) -> bool:
        host = urlsplit(target.url).hostname or "?"
        headers = {"Content-Type": "application/json"}
        if target.token:
            headers["Authorization"] = f"Bearer {target.token}"
        try:
            async with asyncio.timeout(target.timeout):
                session = self._client()
                async with session.post(
                    target.url,
                    json=message.payload(),
                    headers=headers,
                    allow_redirects=False,  # the bearer token goes to the configured URL only
                ) as response:
                    status = response.status
        except Exception as exc:
            log.error("alerts: the webhook at %s failed (%s)", host, self.reason(exc))
            return False
        if 200 <= status < 300:
            return True
        log.error("alerts: the webhook at %s answered HTTP %d", host, status)
        return False

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _mail(self, target: SmtpTarget, message: AlertMessage) -> bool:
        mail = EmailMessage()
        mail["From"] = target.sender
        mail["To"] = ", ".join(target.recipients)
        mail["Subject"] = " ".join(message.subject().split())  # no line break reaches a header
        mail["Date"] = formatdate(message.at, usegmt=True)
        domain = target.sender.rpartition("@")[2] or "fairgate.invalid"
        mail["Message-ID"] = make_msgid("fairgate-alert", domain=domain)
        mail.set_content(message.body())
        login = target.username is not None and target.password is not None
        try:
            await aiosmtplib.send(
                mail,
                hostname=target.host,
                port=target.port,
                username=target.username if login else None,
                password=target.password if login else None,
                start_tls=target.starttls,
                timeout=target.timeout,
            )
        except Exception as exc:
            log.error(
                "alerts: e-mail through %s:%d failed (%s)",
                target.host,
                target.port,
                self.reason(exc),
            )
            return False
        return True
