"""The route and relay stages: pick a replica, relay the attempt, retry while nothing
has reached the client.

    await forwarder.forward(ex, entry, send, ticket)

The tries go down the model's chain (the model, then its fallbacks): for each
model, replicas the router picks (``upstream.ReplicaRegistry``) that were not
tried yet, at most ``1 + retries`` attempts in all. An attempt that fails
before anything reached the client (``relay.AttemptFailed``) is counted against
its replica's breaker (unless the failure is not the replica's) and another is
tried if the failure allows (after an attempt an engine may have worked on, only if
the budgets take one more reservation: ``Limit.retry``); once the client has bytes,
an error ends the request. When every try failed, the last failure is the answer: the engine's
own failed answer if it gave one, else the gateway's error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fairgate.core.asgi import Send
from fairgate.core.errors import ServiceUnavailable
from fairgate.proxy.affinity import routing_inputs
from fairgate.proxy.endpoints import Candidate, ModelEntry
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.reclaim import Reclaimer
from fairgate.proxy.relay import AttemptFailed, Relay
from fairgate.proxy.request import ClientGone
from fairgate.proxy.settle import Settler
from fairgate.proxy.share import share_header
from fairgate.proxy.ticket import Ticket

if TYPE_CHECKING:
    from fairgate.proxy.limit import Limit
    from fairgate.upstream.registry import ReplicaRegistry
    from fairgate.upstream.replica import Replica

__all__ = ["Forwarder", "share_headers"]


class Forwarder:
    """Routes and relays one request over its model chain; built once by the Gateway."""

    def __init__(
        self,
        *,
        relay: Relay,
        registry: ReplicaRegistry,
        settler: Settler,
        retries: int,
        limit: Limit | None = None,
        reclaim: Reclaimer | None = None,
    ) -> None:
        self._relay = relay
        self._reclaim = reclaim  # borrowers preempted for an owner waiting (proxy.reclaim)
        self._registry = registry
        self._settler = settler
        self._retries = retries
        self._limit = limit

    async def forward(self, ex: Exchange, entry: ModelEntry, send: Send, ticket: Ticket) -> None:
        """Serve ``ex`` from a replica of its chain, or answer with the last failure."""
        last: AttemptFailed | None = None
        for position, candidate, replica in self._tries(ex, entry, ticket.within_share):
            try:
                await self._attempt(ex, candidate, replica, send, ticket)
            except AttemptFailed as failed:
                self._failed(ex, candidate.name, replica, failed)
                last = failed
                if not failed.retryable:
                    break
                if (
                    failed.ran
                    and self._limit is not None
                    and ex.attempts <= self._retries
                    and not await self._limit.retry(ex, ticket, candidate.name)
                ):
                    break  # the budgets cannot pay for another attempt: the last failure
                continue
            if position:
                self._settler.fell_back(ex.requested_model, candidate.name)
            return
        await self._answer_failure(ex, entry, send, ticket, last)

    def _tries(
        self, ex: Exchange, entry: ModelEntry, within_share: bool | None
    ) -> Iterator[tuple[int, Candidate, Replica]]:
        """(position in the chain, model, replica) for each attempt: the replicas the
        router picks for each model of the chain in turn, none twice, at most
        ``1 + retries`` in all."""
        budget = 1 + self._retries
        hashed = any(self._registry.uses_prefix(c.name) for c in entry.chain)
        session, prefix = routing_inputs(ex, prefix=hashed)
        for position, candidate in enumerate(entry.chain):
            tried: set[str] = set()
            while budget > 0:
                replica = self._registry.pick(
                    candidate.name,
                    exclude=tried,
                    session=session,
                    prefix=prefix,
                    within_share=within_share,
                )
                if replica is None:
                    break  # this model has no replica left to try: its fallback
                tried.add(replica.name)
                budget -= 1
                ex.attempts += 1
                if ex.attempts > 1:
                    self._settler.retried(ex.requested_model)
                yield position, candidate, replica

    def _failed(self, ex: Exchange, model: str, replica: Replica, failed: AttemptFailed) -> None:
        self._settler.attempt_failed(replica.name, failed.reason)
        if failed.ran:
            ex.unanswered += (model,)
        if failed.replica_at_fault:
            replica.breaker.failure()
        else:
            replica.breaker.abandon()
        ex.reason = failed.reason

    async def _attempt(
        self, ex: Exchange, candidate: Candidate, replica: Replica, send: Send, ticket: Ticket
    ) -> None:
        adapter = replica.adapter
        body = candidate.body_for(ex)
        headers = candidate.headers_for(ex, replica)
        target = replica.prefix + candidate.upstream_target(ex.endpoint)
        # a batch or several choices on an engine that reports each sequence's usage alone
        ex.per_sequence = ex.sequences > 1 and candidate.usage_per_sequence(ex.endpoint)
        # what the engine is told: an engine without a priority scheduler gets none
        ex.sent_priority = ex.priority if adapter.sends_priority else None
        reclaim = self._reclaim
        with self._registry.lease(replica, ticket.within_share):
            ticket.dispatched()
            self._settler.intend(ex, candidate.name, replica.name)
            watched = (
                None
                if reclaim is None
                else reclaim.enter(
                    replica, ex, ticket.pool, ticket.org, not ticket.borrowing, ticket.priority
                )
            )
            try:
                try:
                    opened = await self._relay.open(ex, replica, target, headers, body)
                except (asyncio.CancelledError, ClientGone):
                    # The outcome is unknown: free a half-open probe slot, count nothing.
                    # The engine may be working on the request (a plain answer comes whole
                    # at the end, a stream's first token after the prefill), so it is
                    # charged its reservation, never nothing (proxy.reservation).
                    replica.breaker.abandon()
                    ex.unanswered += (candidate.name,)
                    raise
                if watched is not None and reclaim is not None:
                    reclaim.opened(replica, watched, opened.streaming)
                if opened.status >= 500:
                    # the engine answered: maybe this caller's request trips it, so the
                    # caller counts once per run (core.breaker) and cannot open it alone
                    replica.breaker.failure(_caller(ex))
                else:
                    replica.breaker.success()
                ex.model, ex.replica = candidate.name, replica.name
                extra = [(b"x-request-id", ex.request_id.encode()), *share_headers(ex, ticket)]
                if opened.streaming:
                    await self._relay.stream(
                        ex,
                        opened,
                        send,
                        extra,
                        strip_usage=adapter.rewrites_body and not ex.client_wants_usage,
                    )
                    return
            finally:
                if watched is not None and reclaim is not None:
                    reclaim.leave(replica, watched)
        # A plain answer is whole in memory: the engine is done with it, so the replica
        # stops counting it before a client that reads slowly (or never) is written to.
        await self._relay.send_whole(ex, opened, send, extra)

    async def _answer_failure(
        self,
        ex: Exchange,
        entry: ModelEntry,
        send: Send,
        ticket: Ticket,
        last: AttemptFailed | None,
    ) -> None:
        """Every try failed (or none could be made): raise the gateway's error, or relay
        the engine's own failed answer of the last attempt."""
        if last is None:
            raise ServiceUnavailable(
                f"no replica of model '{entry.chain[0].name}' is available right now",
                code="no_replica",
            )
        if last.answer is None:
            ex.outcome = Outcome.TIMEOUT if last.error.status == 504 else Outcome.UPSTREAM_ERROR
            raise last.error
        status, content_type, body = last.answer
        ex.outcome, ex.status = Outcome.UPSTREAM_ERROR, status
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(body)).encode()),
                    (b"x-request-id", ex.request_id.encode()),
                    *share_headers(ex, ticket),
                ],
            }
        )
        ex.first_byte_at = time.monotonic()
        await send({"type": "http.response.body", "body": body})


def _caller(ex: Exchange) -> str | None:
    principal = ex.principal
    return None if principal is None else principal.key_id


def share_headers(ex: Exchange, ticket: Ticket | None) -> list[tuple[bytes, bytes]]:
    """``X-Fairgate-Share`` for the answer, read now (after dispatch), or nothing; the
    priority is the one the last attempt sent (none before any attempt)."""
    header = share_header(ticket, ex.sent_priority)
    return [] if header is None else [header]
