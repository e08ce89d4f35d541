"""Soft-limit alerts: one per budget and period, by webhook and/or e-mail, off the request path.

The channels are ``fairgate.accounting.delivery`` (shared with the pending-sign-up
notices, ``Alerter.delivery``); this module decides when a soft-limit alert is due
and keeps its once-per-period mark.

    alerter = Alerter(
        store,
        webhook=WebhookTarget("https://hooks.example/fairgate", token="…", timeout=5.0),
        smtp=SmtpTarget("relay.example", sender="gw@example", recipients=("ops@example",)),
        clock=SystemClock(),
        on_sent=lambda channel: …, on_failed=lambda channel: …, on_dropped=lambda why: …,
    )
    alerter.start()                                              # on the gateway's event loop
    alerter.soft_limit_crossed(budget, span.label, span.end, spent, cap)   # never blocks/raises
    await alerter.stop(timeout=10.0)                             # at shutdown: drains the sends

Once per budget and period, across restarts and gateway processes: a process
remembers the alerts it has handled (no second task for the same budget and
period), and the task first claims the alert's mark in the store
(``fairgate.store.alert_marks``); only the process that got the claim sends.
When every channel fails, the claim is given back, so a later request past the
soft limit (here after a minute, or on another process) tries again. When at
least one channel succeeds the alert counts as sent; a failed channel is not
retried. docs/alerts.md has the payload and the guarantees.

Failures never reach the request: they are logged (without the token, the
password or the webhook URL, which may hold credentials) and counted through
the callbacks: ``on_sent(channel)`` and ``on_failed(channel)`` with channel
``"webhook"`` or ``"smtp"``, ``on_dropped(reason)`` with ``"queue_full"``,
``"store_unavailable"`` or ``"stopped"`` for an alert not attempted at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fairgate.accounting.delivery import AlertDelivery, SmtpTarget, WebhookTarget
from fairgate.core.clock import Clock
from fairgate.core.money import Money
from fairgate.limits.budgets import Budget
from fairgate.store import Store, alert_marks
from fairgate.store.timestamp import from_unix

__all__ = ["Alerter", "SmtpTarget", "SoftLimitAlert", "WebhookTarget"]

log = logging.getLogger("fairgate.alerts")

_PRUNE_AFTER = 86_400.0  # seconds a mark is kept once its period has ended
_FORGET_EVERY = 300.0  # seconds between two sweeps of the in-process record
_RETRY_AFTER = 60.0  # seconds before a process tries again an alert it could not send
_ADVERB = {"day": "daily", "week": "weekly", "month": "monthly"}


@dataclass(frozen=True, slots=True)
class SoftLimitAlert:
    """One budget past its soft limit in one period; ``spent`` includes reservations."""

    budget: Budget
    label: str
    period_end: float
    spent: Money
    cap: Money
    at: float

    @property
    def key(self) -> str:
        """The budget's counter key in this period: what makes the alert unique."""
        return self.budget.counter_key(self.label)

    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body (docs/alerts.md)."""
        b = self.budget
        return {
            "type": "budget.soft_limit",
            "id": self.key,
            "message": self.summary(),
            "budget": {
                "scope_kind": b.scope_kind,
                "scope": b.scope,
                "model": b.model,
                "period": b.period,
                "label": self.label,
                "period_end": _iso(self.period_end),
            },
            "soft": _amount(b.soft),
            "cap": _amount(self.cap),
            "spent": _amount(self.spent),
            "timestamp": _iso(self.at),
        }

    def summary(self) -> str:
        soft = "" if self.budget.soft is None else f" of {self.budget.soft}"
        return (
            f"{self.budget.describe()} reached the soft limit{soft} of its"
            f" {_ADVERB[self.budget.period]} budget in {self.label}:"
            f" {self.spent} spent or reserved, cap {self.cap}"
        )

    def subject(self) -> str:
        text = f"fairgate: soft limit reached by {self.budget.describe()} ({self.label})"
        return " ".join(text.split())  # no line break can reach a header (delivery too)

    def body(self) -> str:
        soft = "none" if self.budget.soft is None else str(self.budget.soft)
        return (
            f"{self.summary()}.\n\n"
            f"Scope:   {self.budget.describe()}\n"
            f"Period:  {self.budget.period} {self.label} (ends {_iso(self.period_end)})\n"
            f"Spent:   {self.spent} (recorded plus reserved by requests in flight)\n"
            f"Soft:    {soft}\n"
            f"Cap:     {self.cap}\n\n"
            "Requests go on being admitted until the cap; this alert is sent once per budget"
            " and period.\n"
        )


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _amount(money: Money | None) -> dict[str, Any] | None:
    return None if money is None else {"units": str(money), "micro": money.micro}


def _ignore(_label: str) -> None:
    return None


class Alerter:
    """Sends each budget's soft-limit alert once per period, through the configured channels.

    ``webhook`` and ``smtp`` are the channels (None: not configured); with neither,
    every call does nothing and the store is never written. ``capacity`` (≥ 1)
    bounds the alerts being sent at once: past it, a new one is dropped, counted
    and logged. ``stale_after`` (seconds) is how long a claimed, unsent mark
    waits before another process may take it over (its sender died mid-way).
    The callbacks must not raise; one that does is logged and ignored.
    """

    def __init__(
        self,
        store: Store,
        *,
        webhook: WebhookTarget | None,
        smtp: SmtpTarget | None,
        clock: Clock,
        capacity: int = 1000,
        stale_after: float = 600.0,
        on_sent: Callable[[str], None] | None = None,
        on_failed: Callable[[str], None] | None = None,
        on_dropped: Callable[[str], None] | None = None,
    ) -> None:
        if capacity < 1 or stale_after <= 0:
            raise ValueError("capacity must be >= 1 and stale_after > 0")
        self._store = store
        self.delivery = AlertDelivery(webhook=webhook, smtp=smtp)
        self._clock = clock
        self._capacity = capacity
        self._stale_after = stale_after
        self._on_sent = on_sent or _ignore
        self._on_failed = on_failed or _ignore
        self._on_dropped = on_dropped or _ignore
        # counter key -> until when it is handled: the end of its period, or sooner
        # when this process should look again (a failed send, a claim held elsewhere)
        self._handled: dict[str, float] = {}
        self._next_forget = float("-inf")
        self._pending: set[asyncio.Task[None]] = set()
        self._closing = False

    def use_webhook_token(self, token: str) -> None:
        """Send ``token`` to the webhook from the next alert on (``AlertDelivery``)."""
        self.delivery.use_webhook_token(token)

    def use_smtp_password(self, password: str) -> None:
        """Log in to the SMTP relay with ``password`` from the next alert on."""
        self.delivery.use_smtp_password(password)

    @property
    def enabled(self) -> bool:
        """True when at least one channel is configured."""
        return self.delivery.enabled

    @property
    def pending(self) -> int:
        """Alerts being sent now."""
        return len(self._pending)

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> None:
        """On the running loop: delete the marks of periods long over (in the background)."""
        if self.enabled and not self._closing:
            self._spawn(self._prune(), "fairgate-alerts-prune")

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until every alert in progress is done; True unless ``timeout`` passed first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._pending:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._pending), timeout=remaining)
            self._pending.difference_update([t for t in self._pending if t.done()])
        return True

    # The timeout is a parameter, not the caller's asyncio.timeout(): on expiry the
    # alerter cancels its own sends rather than being cancelled half-way.
    async def stop(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Finish the alerts in progress, then close; True when none had to be cancelled.

        Later crossings are dropped. A send cancelled at ``timeout`` leaves its mark
        claimed but unsent; another process takes it over after ``stale_after``.
        """
        self._closing = True
        finished = await self.wait(timeout)
        if not finished:
            left = list(self._pending)
            log.error("alerts: stop timed out after %.1fs; %d alerts cancelled", timeout, len(left))
            for task in left:
                task.cancel()
            await asyncio.gather(*left, return_exceptions=True)
        await self.delivery.close()
        return finished

    # -- the request path -----------------------------------------------------------

    def soft_limit_crossed(
        self, budget: Budget, period_label: str, period_end: float, spent: Money, cap: Money
    ) -> None:
        """Note that ``budget`` passed its soft limit in the period ``period_label`` (ending
        at ``period_end``, Unix seconds); the alert is sent in the background, once.

        Called for every admission that finds the budget past its soft limit: once
        handled, a budget and period is looked at again only after a failure (a minute)
        or while another process holds its claim unsent (``stale_after``).

        Never blocks and never raises; call it on the event loop.
        """
        if not self.enabled:
            return
        try:
            key = budget.counter_key(period_label)
            now = self._clock.wall()
            self._forget_past(now)
            until = self._handled.get(key)
            if until is not None and now < until:
                return
            if self._closing or len(self._pending) >= self._capacity:
                self._drop("stopped" if self._closing else "queue_full", budget, period_label)
                # dropped once, not on every request past the soft limit meanwhile
                self._handled[key] = min(period_end, now + _RETRY_AFTER)
                return
            alert = SoftLimitAlert(budget, period_label, period_end, spent, cap, now)
            self._spawn(self._deliver(alert), "fairgate-alert")
            self._handled[key] = period_end
        except Exception:  # an alert must never break a request
            log.exception("alerts: a soft-limit alert could not be scheduled")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            work.close()  # not on the event loop: nothing to run it
            raise
        task = loop.create_task(work, name=name)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _forget_past(self, now: float) -> None:
        if now < self._next_forget:
            return
        self._next_forget = now + _FORGET_EVERY
        for key in [k for k, end in self._handled.items() if end <= now]:
            del self._handled[key]

    def _drop(self, reason: str, budget: Budget, label: str) -> None:
        log.error(
            "alerts: the soft-limit alert of %s (%s) was not sent (%s)",
            budget.describe(),
            label,
            reason.replace("_", " "),
        )
        _call(self._on_dropped, reason)

    # -- the background -------------------------------------------------------------

    async def _deliver(self, alert: SoftLimitAlert) -> None:
        where = f"{alert.budget.describe()} ({alert.label})"
        try:
            async with self._store.write() as conn:
                claimed = await alert_marks.claim(
                    conn,
                    alert.key,
                    now=from_unix(self._clock.wall()),
                    period_end=from_unix(alert.period_end),
                    stale_after=self._stale_after,
                )
        except Exception as exc:
            self._retry_later(alert, _RETRY_AFTER)
            log.error(
                "alerts: the soft-limit alert of %s was not sent: its mark could not be"
                " stored (%s)",
                where,
                self._reason(exc),
            )
            _call(self._on_dropped, "store_unavailable")
            return
        if not claimed:
            log.debug("alerts: the soft-limit alert of %s is sent by another process", where)
            # sent, or being sent: look again once a claim left unsent may be taken over
            self._retry_later(alert, self._stale_after)
            return
        results = await self._send(alert)
        if any(ok for ok in results.values()):
            await self._keep(alert, results, where)
        else:
            await self._give_back(alert, where)

    async def _send(self, alert: SoftLimitAlert) -> dict[str, bool]:
        results = await self.delivery.send(alert)
        for channel, ok in results.items():
            _call(self._on_sent if ok else self._on_failed, channel)
        return results

    async def _keep(self, alert: SoftLimitAlert, results: Mapping[str, bool], where: str) -> None:
        log.info(
            "alerts: soft-limit alert of %s sent (%s)",
            where,
            ", ".join(f"{c} {'sent' if ok else 'failed'}" for c, ok in results.items()),
        )
        try:
            async with self._store.write() as conn:
                await alert_marks.mark_sent(
                    conn,
                    alert.key,
                    now=from_unix(self._clock.wall()),
                    channels={c: "sent" if ok else "failed" for c, ok in results.items()},
                )
        except Exception as exc:
            # The claim stays: another process may send it again after stale_after.
            log.warning(
                "alerts: the soft-limit alert of %s was sent but not marked so (%s)",
                where,
                self._reason(exc),
            )

    def _retry_later(self, alert: SoftLimitAlert, after: float) -> None:
        """Handle ``alert``'s budget and period again from ``after`` seconds from now on."""
        self._handled[alert.key] = min(alert.period_end, self._clock.wall() + after)

    async def _give_back(self, alert: SoftLimitAlert, where: str) -> None:
        self._retry_later(alert, _RETRY_AFTER)
        try:
            async with self._store.write() as conn:
                await alert_marks.release(conn, alert.key)
        except Exception as exc:
            log.warning(
                "alerts: the claim of %s could not be given back (%s); it lapses after %.0fs",
                where,
                self._reason(exc),
                self._stale_after,
            )
        log.error(
            "alerts: the soft-limit alert of %s failed on every channel; retried in a minute",
            where,
        )

    async def _prune(self) -> None:
        before = from_unix(self._clock.wall() - _PRUNE_AFTER)
        try:
            async with self._store.write() as conn:
                removed = await alert_marks.prune(conn, before=before)
        except Exception as exc:
            log.warning("alerts: old alert marks could not be pruned (%s)", self._reason(exc))
            return
        if removed:
            log.info("alerts: %d alert marks of past periods pruned", removed)

    def _reason(self, exc: BaseException) -> str:
        return self.delivery.reason(exc)


def _call(callback: Callable[[str], None], label: str) -> None:
    try:
        callback(label)
    except Exception:
        log.exception("alerts: a metrics callback failed")
