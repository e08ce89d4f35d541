"""The last stage: every request is settled once, whatever its outcome, in this order:

1. charge    ``ex.usage`` becomes what the request is charged (``proxy.reservation.charge``)
2. cost      ``ex.cost``: that usage at the served model's prices, and each unanswered
             attempt's reservation at the prices of the model it tried; computed here only
3. leave     the admission lease is given back and the fair-share claim's release and
             usage charge are left on the ticket (``Admit.leave``); the limits are
             settled and charged ``ex.usage`` and ``ex.cost``, paying the claim in the
             same state call (``Limit.leave``); what is still owed is paid and the
             dispatcher told of the freed seat (``Admit.finish``)
4. record    the accounting record, at the same cost (``proxy.records``)
5. metrics   and the log line

It is the one call of the pipeline's ``finally``. It first ends the watch on the
client's connection (``ex.unwatch``): from then on a disconnect cancels nothing.
Only the leave step awaits (the state back end); when it is cancelled, the later
leaves, the record and the metrics are still made, and nothing here raises but
that ``CancelledError``.

An answer's end comes first: when the answer's last message, or the message of a
stream that carries its terminal event (``data: [DONE]``, the Responses API's
``response.completed``, llama.cpp's stop event, after which a client may stop
reading), is handed to the server, steps 1, 2 and 4 are made then (``Settler.end``,
called by the pipeline), and ``settle`` later makes only the others. The record is in
the recorder's queue, and in its journal, before the client can have the whole
answer, so a process killed (SIGKILL) at any moment after that has journaled the
record of every answer a client received whole. It records the answer as it stood
then: what happens after (the client not reading the rest, the engine's connection
breaking after the terminal event) does not change the record, only the metrics, and
the charge is the same.

A plain answer is whole in the gateway before it is written. When the server cannot
take it yet (an earlier answer on the same connection is still waiting for the client
to read it), the pipeline calls ``Settler.release`` first: steps 1 to 4 are made then,
and the client's reading holds nothing the engines' capacity is shared by.

Before that, as each attempt is about to reach an engine, ``intend`` journals a
write-ahead entry (``proxy.records``): what the request owes if the process is killed
before its record is made, its reservation for this attempt and every earlier
unanswered one, each at the prices of the model it tried. A stream cut off mid-way by a kill is
charged that when the next process replays the journal (``accounting.journal``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from fairgate.accounting import Prices
from fairgate.core.money import Money
from fairgate.observability.metrics import GatewayMetrics
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.reservation import charge
from fairgate.proxy.usage import Usage

if TYPE_CHECKING:
    from fairgate.proxy.ticket import Ticket

__all__ = ["Settler"]

_FREE = Money(0)

log = logging.getLogger("fairgate.request")


def _stop_watching(ex: Exchange) -> None:
    ex.complete = True  # from here on a disconnect does not cancel the request
    if ex.unwatch is not None:
        ex.unwatch()
        ex.unwatch = None


class Settler:
    """``prices`` per canonical model (a model without any costs nothing); ``leave`` give
    back what a ticket holds, in their order (the admit stage's, then the limit
    stage's); ``record`` builds the accounting record."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        *,
        prices: Mapping[str, Prices] | None = None,
        leave: Sequence[Callable[[Ticket, Exchange], Awaitable[None]]] = (),
        record: Callable[[Exchange], None] | None = None,
        intend: Callable[[Exchange, str, str, Usage, Money, Mapping[str, Money] | None], None]
        | None = None,
    ) -> None:
        self._m = metrics
        self._prices: Mapping[str, Prices] = {} if prices is None else prices
        self._leave = tuple(leave)
        self._record = record
        self._intend = intend
        # Read once: the level does not change while serving, and the check costs µs.
        self._debug = log.isEnabledFor(logging.DEBUG)

    def price(self, ex: Exchange, served: Usage | None) -> None:
        """Set ``ex.cost``: ``served`` (the answered attempt's part of ``ex.usage``, from
        ``reservation.charge``) at the served model's prices, and each unanswered
        attempt's reservation at the prices of the model it tried, that split per model
        left in ``ex.costs`` for the per-model budgets. Nothing when no engine was
        reached."""
        if not ex.unanswered:  # the common case, without a call more
            prices = self._prices.get(ex.model)
            ex.cost = prices.cost_of(served) if prices is not None and served is not None else _FREE
            return
        reservation = ex.reservation
        assert reservation is not None  # an attempt was made: the request was reserved
        costs: dict[str, Money] = {}
        if served is not None:
            costs[ex.model] = self._cost(ex.model, served)
        one = reservation.usage()
        for model in ex.unanswered:
            cost = self._cost(model, one)
            costs[model] = costs[model] + cost if model in costs else cost
        ex.costs = costs
        ex.cost = sum(costs.values(), _FREE)

    def _cost(self, model: str, usage: Usage) -> Money:
        prices = self._prices.get(model)
        return prices.cost_of(usage) if prices is not None else _FREE

    def intend(self, ex: Exchange, model: str, replica: str) -> None:
        """An attempt of ``ex`` on ``model`` at ``replica`` is about to reach the engine:
        journal what the request would be charged if the process died now (the module
        text), split per model when earlier attempts went unanswered. Never raises."""
        reservation = ex.reservation
        if self._intend is None or reservation is None:
            return
        usage = reservation.usage(len(ex.unanswered) + 1)
        try:
            if ex.unanswered:  # each earlier attempt at the prices of the model it tried
                one = reservation.usage()
                costs = {model: self._cost(model, one)}
                for tried in ex.unanswered:
                    cost = self._cost(tried, one)
                    costs[tried] = costs[tried] + cost if tried in costs else cost
                self._intend(ex, model, replica, usage, sum(costs.values(), _FREE), costs)
            else:
                prices = self._prices.get(model)
                cost = prices.cost_of(usage) if prices is not None else _FREE
                self._intend(ex, model, replica, usage, cost, None)
        except Exception:  # never let accounting break the request; the record still comes
            log.exception("could not journal the write-ahead entry of %s", ex.request_id)

    def end(self, ex: Exchange) -> None:
        """The answer's end (its last message, or a stream's terminal event) is about to
        go out: charge, cost and record ``ex`` now (once), so that its record is
        journaled before the client has the whole answer (see the module text)."""
        if ex.recorded:
            return
        ex.finished = time.monotonic()
        self.price(ex, charge(ex))
        self._record_of(ex)

    async def release(self, ex: Exchange, ticket: Ticket) -> None:
        """``ex``'s answer is whole in the gateway, but handing it to the server must wait
        for the client to read an earlier one: charge, cost, record and give back now
        (once), so that a client that does not read holds no admission place, fair-share
        seat or in-flight count of its key while the listener waits for it; ``settle``
        then makes only the metrics."""
        self.end(ex)
        _stop_watching(ex)
        ex.released = True
        await self._give_back(ticket, ex)

    async def settle(self, ex: Exchange, ticket: Ticket | None = None) -> None:
        """Settle ``ex`` in the order of the module text; ``ticket`` is what the limit
        and admit stages took for it (None: refused before them, or neither ran)."""
        _stop_watching(ex)
        ex.finished = time.monotonic()
        recorded = ex.recorded  # charged, priced and recorded as its answer ended
        if not recorded:
            self.price(ex, charge(ex))
        try:
            if ticket is not None and not ex.released:
                await self._give_back(ticket, ex)
        finally:
            if not recorded:
                self._record_of(ex)
            self._account(ex)

    async def _give_back(self, ticket: Ticket, ex: Exchange) -> None:
        # Each stage gives back its own slots: one cancelled (the server's grace period
        # ran out while the state back end answered) does not skip the next.
        cancelled: asyncio.CancelledError | None = None
        for leave in self._leave:
            try:
                await leave(ticket, ex)
            except asyncio.CancelledError as error:
                cancelled = error
        if cancelled is not None:
            raise cancelled

    def _record_of(self, ex: Exchange) -> None:
        ex.recorded = True
        if self._record is not None:
            try:
                self._record(ex)
            except Exception:  # never let accounting break the answer; counted as a drop
                log.exception("could not build the usage record of %s", ex.request_id)
                self._m.child(self._m.accounting, "dropped").inc()

    def _account(self, ex: Exchange) -> None:
        m = self._m
        model = ex.model or "-"
        route = ex.endpoint or "-"
        finished = ex.finished or ex.started
        total = finished - ex.started
        status = (
            str(ex.status) if ex.status else ("499" if ex.outcome == Outcome.CLIENT_ABORT else "0")
        )
        settled = m.settled(model, route, status)
        settled.requests.inc()
        settled.duration.observe(total)
        if ex.first_byte_at is not None and ex.replica:
            settled.ttft.observe(ex.first_byte_at - ex.started)
        if ex.replica:
            m.overhead.observe(max(0.0, total - ex.upstream_time))
        usage = ex.usage
        if usage is not None:
            if usage.prompt_tokens:
                settled.prompt_tokens.inc(usage.prompt_tokens)
            if usage.completion_tokens:
                settled.completion_tokens.inc(usage.completion_tokens)
            if usage.cached_tokens:
                settled.cached_tokens.inc(usage.cached_tokens)
            if usage.estimated:
                settled.estimated.inc()
        if ex.outcome == Outcome.REFUSED:
            m.child(m.denials, ex.reason or "refused").inc()
        elif (
            ex.outcome
            in (
                Outcome.CLIENT_ABORT,
                Outcome.SLOW_READER,
                Outcome.TRUNCATED,
                Outcome.TIMEOUT,
                Outcome.REVOKED,
                Outcome.PREEMPTED,
            )
            and ex.stream
        ):
            m.child(m.stream_aborts, ex.reason or ex.outcome).inc()
        if ex.outcome != Outcome.OK:
            # Refused credentials are counted (fairgate_denials) and logged by auth with
            # their reason; one info line each here would let a key spray flood the log.
            quiet = ex.outcome == Outcome.REFUSED and ex.status in (401, 429)
            log.log(
                logging.DEBUG if quiet else logging.INFO,
                "request %s %s %s ended %s (%s) status=%s replica=%s attempts=%d client=%s",
                ex.request_id,
                ex.method,
                ex.path,
                ex.outcome,
                ex.reason,
                status,
                ex.replica or "-",
                ex.attempts,
                ex.client or "-",
            )
        elif self._debug:
            log.debug(
                "request %s %s model=%s replica=%s status=%s attempts=%d total=%.4fs client=%s",
                ex.request_id,
                ex.path,
                model,
                ex.replica,
                status,
                ex.attempts,
                total,
                ex.client or "-",
            )

    def retried(self, model: str) -> None:
        self._m.child(self._m.retries, model).inc()

    def fell_back(self, model: str, fallback: str) -> None:
        self._m.child(self._m.fallbacks, model, fallback).inc()

    def attempt_failed(self, replica: str, reason: str) -> None:
        self._m.child(self._m.upstream_errors, replica, reason).inc()
