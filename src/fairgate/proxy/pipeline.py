"""The hot path: identify → read → limit, fair share, admit (the gate) → route → relay → settle.

Each stage is a call on an object built once by the Gateway; nothing here reads
the configuration file, the store or the environment. Retries and fallbacks
happen only while nothing has reached the client (``Exchange.responded``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fairgate.core.asgi import Receive, Scope, Send
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.errors import (
    BadRequest,
    GatewayError,
    NotFound,
    ServiceUnavailable,
)
from fairgate.core.principal import Principal
from fairgate.core.route_classes import RouteRules, refusal
from fairgate.engines import FieldRefused, is_json
from fairgate.proxy.affinity import routing_inputs
from fairgate.proxy.endpoints import EndpointTable, ModelEntry
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.gate import Gate, Ticket
from fairgate.proxy.relay import AttemptFailed, Relay, SlowReader
from fairgate.proxy.request import Caps, ClientGone, check_caps, parse_json, read_body
from fairgate.proxy.reservation import OutputPolicy
from fairgate.proxy.responses import ResponseScope
from fairgate.proxy.settle import Settler
from fairgate.proxy.share import share_header
from fairgate.proxy.sse import error_event
from fairgate.server.protocol import ABORT_EXTENSION, DISCONNECT_EXTENSION

__all__ = ["Pipeline"]

log = logging.getLogger("fairgate.proxy")


class Pipeline:
    """Serves one client request end to end; stateless between requests."""

    def __init__(
        self,
        *,
        endpoints: EndpointTable,
        caps: Caps,
        output: OutputPolicy,
        relay: Relay,
        registry: Any,
        settler: Settler,
        retries: int,
        request_ids: Callable[[], str],
        authenticate: Callable[[bytes | None, str], Awaitable[Principal]],
        stopping: Callable[[], bool] = lambda: False,
        gate: Gate | None = None,
        salt: Callable[[Principal], str | None] = lambda _p: None,
        session_header: bytes = b"x-session-id",
        tags_header: bytes = b"x-fairgate-tags",
        responses: ResponseScope | None = None,
        clients: ClientAddresses | None = None,
        rules: RouteRules | None = None,
    ) -> None:
        self._endpoints = endpoints
        self._caps = caps
        self._output = output
        self._relay = relay
        self._registry = registry
        self._settler = settler
        self._retries = retries
        self._ids = request_ids
        self._stopping = stopping  # true once the server drains: a cancellation is its own
        self._authenticate = authenticate
        self._gate = gate
        self._salt = salt
        self._session_header = session_header
        self._tags_header = tags_header
        self._responses = responses
        self._clients = clients
        # decided once: without a rule for inference, no request pays for a check
        self._rules = rules if rules is not None and rules.restricts("inference") else None

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        peer = client[0] if client else ""
        ex = Exchange(
            request_id=self._ids(),
            method=scope["method"],
            path=scope["path"],
            started=time.monotonic(),
            client=peer if self._clients is None else self._clients.of(peer, scope["headers"]),
        )
        watcher: _Watcher | None = None
        ticket: Ticket | None = None
        try:
            # identify: before anything else, whatever the path, so no route can be
            # reached without a key (unknown paths answer 401 too, not 404).
            authorization, length, tags = self._scan_headers(scope, ex)
            if self._rules is not None and not self._rules.allows("inference", ex.client):
                log.info(
                    "refused %s from %s: not in routes.inference.allow", ex.request_id, ex.client
                )
                raise refusal()
            ex.principal = await self._authenticate(authorization, ex.client)
            route = self._endpoints.resolve_path(scope.get("raw_path") or scope["path"].encode())
            ex.endpoint = route.name
            if route.local is not None and scope["method"] == "GET":
                if self._gate is not None:
                    await self._gate.meter(ex)
                await route.local(scope, ex, send)
                return
            if route.local is not None or scope["method"] != "POST":
                raise NotFound(
                    f"unknown route {scope['method']} {scope['path']}", code="unknown_route"
                )
            if self._gate is not None:
                # before the body: a key the limiter would refuse costs no body's memory
                self._gate.check_head(ex.principal)
            await self._read(receive, ex, length)
            entry = self._output.reserve(ex, self._endpoints.model_for(ex))
            _check_fields(ex, entry)
            ex.cache_salt = self._salt(ex.principal)
            if self._responses is not None:
                await self._responses.check(ex)  # a state read only with previous_response_id
            watcher = _watch_disconnect(scope, receive, ex)
            if self._gate is not None:
                ticket = await self._gate.enter(ex, tags)
            await self._forward(ex, entry, send, ticket)
        except GatewayError as error:
            ex.status = error.status
            ex.reason = ex.reason or (error.code or type(error).__name__)
            if ex.outcome == Outcome.OK:
                ex.outcome = Outcome.REFUSED if not ex.attempts else Outcome.UPSTREAM_ERROR
            if not ex.responded:
                # after the fair-share claim (the gateway's own 502/503/504) the answer
                # says how the request stood; a refusal before it has no ticket
                await _send_error(send, error, ex, _share(ex, ticket))
        except ClientGone:
            ex.outcome, ex.reason = Outcome.CLIENT_ABORT, "client_gone_before_body"
        except SlowReader:
            ex.outcome, ex.reason = Outcome.SLOW_READER, "client_fell_behind"
            _abort_connection(scope)
        except asyncio.CancelledError:
            disconnected = ex.disconnected
            if not disconnected and not self._stopping():
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if disconnected:
                ex.outcome, ex.reason = Outcome.CLIENT_ABORT, "client_disconnected"
            else:
                # The server is stopping and the grace period is over: say so, rather
                # than break the answer off with nothing the client can tell apart.
                ex.outcome, ex.reason = Outcome.TRUNCATED, "shutdown"
                await _end_at_shutdown(send, ex)
        finally:
            if watcher is not None:
                _unwatch(watcher)
            await self._settler.settle(ex, ticket)

    def _scan_headers(
        self, scope: Scope, ex: Exchange
    ) -> tuple[bytes | None, bytes | None, bytes | None]:
        """One pass over the request's headers: content type, accept, the session and
        whether a body is announced onto the exchange; returns the Authorization,
        Content-Length and tags values (the rest is never forwarded)."""
        authorization = length = tags = None
        session, tags_name = self._session_header, self._tags_header
        for name, value in scope["headers"]:
            if name == b"authorization":
                # the first, as the admin API and the metrics door read it
                if authorization is None:
                    authorization = value
            elif name == b"content-type":
                ex.content_type = value
            elif name == b"content-length":
                length = value
                ex.body_unread = value.strip() != b"0"
            elif name == b"transfer-encoding":
                ex.body_unread = True
            elif name == b"accept":
                ex.accept = value
            elif name == b"accept-encoding":
                ex.accept_encoding = value
            elif name == session:
                ex.session = value
            elif name == tags_name:
                tags = value
        return authorization, length, tags

    async def _read(self, receive: Receive, ex: Exchange, length: bytes | None) -> None:
        declared = None
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                raise BadRequest("invalid Content-Length header") from None
        ex.body = await read_body(receive, declared, self._caps)
        ex.body_unread = False
        ex.prompt_bytes = len(ex.body)
        # Any spelling the model check reads as JSON (``Application/JSON``,
        # ``application/…+json``) is parsed here, so the caps cannot be sidestepped.
        if ex.content_type is None or is_json(ex.content_type):
            ex.parsed = parse_json(ex.body)
            check_caps(ex.parsed, self._caps)
            ex.stream = ex.parsed.get("stream") is True
            options = ex.parsed.get("stream_options")
            ex.client_wants_usage = (
                isinstance(options, dict) and options.get("include_usage") is True
            )

    async def _forward(
        self, ex: Exchange, entry: ModelEntry, send: Send, ticket: Ticket | None = None
    ) -> None:
        budget = 1 + self._retries
        last: AttemptFailed | None = None
        hashed = any(self._registry.uses_prefix(c.name) for c in entry.chain)
        session, prefix = routing_inputs(ex, prefix=hashed)
        share = ticket.within_share if ticket is not None else None
        for position, candidate in enumerate(entry.chain):
            tried: set[str] = set()
            while budget > 0:
                replica = self._registry.pick(
                    candidate.name,
                    exclude=tried,
                    session=session,
                    prefix=prefix,
                    within_share=share,
                )
                if replica is None:
                    break
                tried.add(replica.name)
                budget -= 1
                ex.attempts += 1
                if ex.attempts > 1:
                    self._settler.retried(ex.requested_model)
                try:
                    await self._attempt(ex, candidate, replica, send, ticket)
                except AttemptFailed as failed:
                    self._settler.attempt_failed(replica.name, failed.reason)
                    if failed.ran:
                        ex.unanswered += 1
                    if failed.replica_at_fault:
                        replica.breaker.failure()
                    else:
                        replica.breaker.abandon()
                    last = failed
                    ex.reason = failed.reason
                    if not failed.retryable:
                        budget = 0
                    continue
                if position:
                    self._settler.fell_back(ex.requested_model, candidate.name)
                return
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
                    *_share(ex, ticket),
                ],
            }
        )
        ex.first_byte_at = time.monotonic()
        await send({"type": "http.response.body", "body": body})

    async def _attempt(
        self, ex: Exchange, candidate: Any, replica: Any, send: Send, ticket: Ticket | None
    ) -> None:
        adapter = replica.adapter
        body = candidate.body_for(ex)
        headers = candidate.headers_for(ex, replica)
        target = replica.prefix + candidate.upstream_target(ex.endpoint)
        # what the engine is told: an engine without a priority scheduler gets none
        ex.sent_priority = ex.priority if adapter.sends_priority else None
        share = ticket.within_share if ticket is not None else None
        with self._registry.lease(replica, share):
            if ticket is not None:
                ticket.dispatched()
            try:
                opened = await self._relay.open(ex, replica, target, headers, body)
            except (asyncio.CancelledError, ClientGone):
                # The outcome is unknown: free a half-open probe slot, count nothing. The
                # engine may be working on the request (a plain answer comes whole at the
                # end, a stream's first token after the prefill), so it is charged its
                # reservation, never nothing (proxy.reservation).
                replica.breaker.abandon()
                ex.unanswered += 1
                raise
            if opened.status >= 500:
                replica.breaker.failure()
            else:
                replica.breaker.success()
            ex.model, ex.replica = candidate.name, replica.name
            extra = [(b"x-request-id", ex.request_id.encode()), *_share(ex, ticket)]
            if opened.streaming:
                await self._relay.stream(
                    ex,
                    opened,
                    send,
                    extra,
                    strip_usage=adapter.rewrites_body and not ex.client_wants_usage,
                )
            else:
                await self._relay.send_whole(ex, opened, send, extra)


def _check_fields(ex: Exchange, entry: ModelEntry) -> None:
    """The chain's request policies (``engines.policy``); a refusal is logged with its field."""
    try:
        entry.check_fields(ex)
    except FieldRefused as refused:
        log.info(
            "request %s refused: %s (%s, model %s)",
            ex.request_id,
            refused.code,
            refused.message,
            ex.requested_model,
        )
        raise


_Watcher = Callable[[Callable[[], None] | None], None] | asyncio.Task[None]


def _watch_disconnect(scope: Scope, receive: Receive, ex: Exchange) -> _Watcher:
    """Cancel the request's task the moment its client disconnects (upstream cancelled with it).

    The listener's protocol calls back on connection loss; under a server without
    that extension a task waits on ``receive()`` instead. The result is handed to
    ``_unwatch`` when the request ends.
    """
    task = asyncio.current_task()

    def lost() -> None:
        if not ex.complete and task is not None:
            ex.disconnected = True
            task.cancel()

    register = scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
    if register is not None:
        register(lost)
        return register  # type: ignore[no-any-return]

    async def watch() -> None:
        message = await receive()
        if message["type"] == "http.disconnect":
            lost()

    return asyncio.ensure_future(watch())


def _unwatch(watcher: _Watcher) -> None:
    if isinstance(watcher, asyncio.Task):
        watcher.cancel()
    else:
        watcher(None)


def _abort_connection(scope: Scope) -> None:
    """Reset the client's connection: one that stopped reading cannot be closed politely."""
    abort = scope.get("extensions", {}).get(ABORT_EXTENSION)
    if abort is not None:
        abort()


async def _end_at_shutdown(send: Send, ex: Exchange) -> None:
    if not ex.responded:
        error = ServiceUnavailable("the gateway is shutting down", code="shutting_down")
        ex.status = error.status
        await _send_error(send, error, ex)
    elif ex.stream and ex.status == 200:
        tail = error_event("the gateway shut down before the answer ended", "shutting_down")
        await send({"type": "http.response.body", "body": tail, "more_body": False})


def _share(ex: Exchange, ticket: Ticket | None) -> list[tuple[bytes, bytes]]:
    """``X-Fairgate-Share`` for the answer, read now (after dispatch), or nothing; the
    priority is the one the last attempt sent (none before any attempt)."""
    header = share_header(ticket, ex.sent_priority)
    return [] if header is None else [header]


async def _send_error(
    send: Send, error: GatewayError, ex: Exchange, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    body = error.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", ex.request_id.encode()),
        *error.headers(),
        *extra,
    ]
    if ex.body_unread or error.status == 413 or error.code == "body_timeout":
        # The body (or the rest of it) may still be arriving, slowly or a lot of it:
        # closing after the answer means it is never read, not even to be discarded.
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    ex.first_byte_at = time.monotonic()
    await send({"type": "http.response.body", "body": body})
