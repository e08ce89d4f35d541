"""The hot path, stage by stage; each stage is one object the Gateway built.

    read       the head; later the endpoint; the body, model, tags   proxy/read.py (Read)
    identify   the credential becomes a Principal    proxy/identify.py (Identify, over auth/)
    limit      head check before the body; rate limits and budgets   proxy/limit.py (Limit)
    admit      admission lease and fair-share claim  proxy/admit.py (Admit)
    route      pick a replica, retry                 proxy/forward.py (Forwarder)
    relay      the attempt                           proxy/relay.py (through the Forwarder)
    settle     charge, give back, record             proxy/settle.py (Settler)

The order of the calls in ``handle``: ``Read.head`` (one pass over the headers, the
credential among them) → ``Identify.enter`` (before the path is even resolved, so no
route answers a caller without a key) → ``Read.endpoint`` (the gateway's own GET
endpoints are metered and answered here) → ``Limit.check_head`` (a key the limiter
would refuse costs no body's memory) → ``Read.body`` → ``Limit.enter`` (with the
fair-share claim riding along when the band has room: ``Admit.claim_ahead``) →
``Admit.enter`` → ``Forwarder.forward`` (routes, relays each attempt, retries while
nothing reached the client) → ``Settler.settle``, the one call in the ``finally``.
An inference request is held in ``InFlight`` (proxy/in_flight.py) from its identify
stage to its settle: cut if its credential stops being valid meanwhile. Every message
goes out through ``send``, which hands the answer's last one (or a
stream's terminal event) to the server only after ``Settler.end`` recorded the request
(proxy/settle.py says why), and a plain answer's message the server would hold until
the client reads an earlier one only after ``Settler.release`` gave its places back.
Nothing here reads the configuration file, the store or the environment.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence

from fairgate.core.asgi import Message, Receive, Scope, Send
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.errors import GatewayError, NotFound, ServiceUnavailable
from fairgate.proxy.admit import Admit
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.forward import Forwarder, share_headers
from fairgate.proxy.identify import Identify
from fairgate.proxy.in_flight import InFlight
from fairgate.proxy.limit import Limit
from fairgate.proxy.read import Read
from fairgate.proxy.relay import SlowReader
from fairgate.proxy.request import ClientGone
from fairgate.proxy.settle import Settler
from fairgate.proxy.sse import error_event
from fairgate.proxy.ticket import Ticket
from fairgate.server.protocol import (
    ABORT_EXTENSION,
    DISCONNECT_EXTENSION,
    INVALID_BODY_EXTENSION,
    WRITE_WAITS_EXTENSION,
)

__all__ = ["Pipeline"]

log = logging.getLogger("fairgate.proxy")


class Pipeline:
    """Serves one client request end to end; stateless between requests.

    ``limit`` and ``admit`` are the limit and admit stages (None: nothing to limit
    or admit, as in a test of the other stages); ``forwarder`` routes and relays.
    """

    def __init__(
        self,
        *,
        read: Read,
        identify: Identify,
        forwarder: Forwarder,
        settler: Settler,
        request_ids: Callable[[], str],
        stopping: Callable[[], bool] = lambda: False,
        limit: Limit | None = None,
        admit: Admit | None = None,
        clients: ClientAddresses | None = None,
        exchange: Callable[[bytes | None, str], Awaitable[bytes]] | None = None,
        exchange_path: str = "/v1/auth/exchange",
        in_flight: InFlight | None = None,
    ) -> None:
        self._read = read
        self._identify = identify
        self._forwarder = forwarder
        self._settler = settler
        self._ids = request_ids
        self._stopping = stopping  # true once the server drains: a cancellation is its own
        self._limit = limit
        self._admit = admit
        self._clients = clients
        self._exchange = exchange
        self._exchange_path = exchange_path
        self._in_flight = in_flight

    async def handle(self, scope: Scope, receive: Receive, to_server: Send) -> None:
        client = scope.get("client")
        peer = client[0] if client else ""
        ex = Exchange(
            request_id=self._ids(),
            method=scope["method"],
            path=scope["path"],
            started=time.monotonic(),
            client=peer if self._clients is None else self._clients.of(peer, scope["headers"]),
        )
        ticket = Ticket()
        end = self._settler.end
        waits = scope.get("extensions", {}).get(WRITE_WAITS_EXTENSION)

        async def send(message: Message) -> None:
            # the answer's last message, or the one with its stream's terminal event: the
            # record goes to the journal first (proxy.settle)
            if message["type"] == "http.response.body" and (
                ex.ending or not message.get("more_body")
            ):
                end(ex)
            if waits is not None and not ex.stream and not ex.released and waits():
                # a plain answer is whole before it is sent: its places go back before
                # the server waits for the client to read (Settler.release)
                if ex.first_byte_at is None:
                    ex.first_byte_at = time.monotonic()
                await self._settler.release(ex, ticket)
            await to_server(message)

        try:
            authorization, length, tags = self._read.head(scope, ex)
            if self._exchange is not None and scope["path"] == self._exchange_path:
                await self._exchanged(scope, ex, authorization, send)
                return
            mark = self._in_flight.mark() if self._in_flight is not None else None
            principal = await self._identify.enter(ex, authorization)
            endpoint = self._read.endpoint(scope, ex)
            if endpoint.local is not None and scope["method"] == "GET":
                if self._limit is not None:
                    await self._limit.meter(ex)
                await endpoint.local(scope, ex, send)
                return
            if endpoint.local is not None or scope["method"] != "POST":
                raise NotFound(
                    f"unknown route {scope['method']} {scope['path']}", code="unknown_route"
                )
            if self._in_flight is not None:
                # cut if its credential stops being valid while it runs (proxy.in_flight)
                self._in_flight.add(ex, authorization, mark)
            if self._limit is not None:
                # before the body: a key the limiter would refuse costs no body's memory
                self._limit.check_head(principal)
            entry = await self._read.body(receive, ex, length, tags)
            _watch_disconnect(scope, receive, ex)
            if self._limit is not None:
                # the fair-share claim rides with the limits when it can (one round trip)
                ahead = self._admit.claim_ahead(ex) if self._admit is not None else None
                await self._limit.enter(ex, ticket, ahead)
            if self._admit is not None:
                await self._admit.enter(ex, ticket)
            await self._forwarder.forward(ex, entry, send, ticket)
        except GatewayError as error:
            ex.status = error.status
            ex.reason = ex.reason or (error.code or type(error).__name__)
            if ex.outcome == Outcome.OK:
                ex.outcome = Outcome.REFUSED if not ex.attempts else Outcome.UPSTREAM_ERROR
            if not ex.responded:
                # after the fair-share claim (the gateway's own 502/503/504) the answer
                # says how the request stood; a refusal before it holds no claim
                await _send_error(send, error, ex, share_headers(ex, ticket))
        except ClientGone:
            if _body_was_invalid(scope):  # the server answered 400 for it (server.protocol)
                ex.outcome, ex.status, ex.reason = Outcome.REFUSED, 400, "invalid_http"
            else:
                ex.outcome, ex.reason = Outcome.CLIENT_ABORT, "client_gone_before_body"
        except SlowReader:
            ex.outcome, ex.reason = Outcome.SLOW_READER, "client_fell_behind"
            _abort_connection(scope)
        except asyncio.CancelledError:
            disconnected = ex.disconnected
            revoked, preempted = ex.revoked, ex.preempted
            if not disconnected and revoked is None and preempted is None and not self._stopping():
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            if disconnected:
                ex.outcome, ex.reason = Outcome.CLIENT_ABORT, "client_disconnected"
            elif revoked is not None:
                ex.outcome, ex.reason = Outcome.REVOKED, "credential_revoked"
                # the refusal a new request with the credential gets
                await _end_cut(send, ex, revoked, scope)
            elif preempted is not None:
                # fair share took its seat back for its owner (proxy.reclaim): not retried
                ex.outcome, ex.reason = Outcome.PREEMPTED, "preempted_for_owner"
                retry = (b"retry-after", str(max(1, math.ceil(preempted))).encode())
                reclaimed = ServiceUnavailable(_PREEMPTED, code="preempted")
                await _end_cut(send, ex, reclaimed, scope, [retry, *share_headers(ex, ticket)])
            else:
                # The server is stopping and the grace period is over: say so, rather
                # than break the answer off with nothing the client can tell apart.
                ex.outcome, ex.reason = Outcome.TRUNCATED, "shutdown"
                await _end_at_shutdown(send, ex)
        finally:
            if self._in_flight is not None:
                self._in_flight.remove(ex)
            await self._settler.settle(ex, ticket)

    async def _exchanged(
        self, scope: Scope, ex: Exchange, authorization: bytes | None, send: Send
    ) -> None:
        """``POST /v1/auth/exchange``: a workload token for a short-lived key (auth.jwt)."""
        ex.endpoint = "auth_exchange"
        self._identify.allowed(ex)
        if scope["method"] != "POST":
            raise NotFound(f"unknown route {scope['method']} {scope['path']}", code="unknown_route")
        assert self._exchange is not None
        body = await self._exchange(authorization, ex.client)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
            (b"x-request-id", ex.request_id.encode()),
        ]
        if ex.body_unread:
            headers.append((b"connection", b"close"))
        ex.status = 200
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        ex.first_byte_at = time.monotonic()
        await send({"type": "http.response.body", "body": body})


def _watch_disconnect(scope: Scope, receive: Receive, ex: Exchange) -> None:
    """Cancel the request's task the moment its client disconnects (upstream cancelled with it).

    The listener's protocol calls back on connection loss; under a server without
    that extension a task waits on ``receive()`` instead. ``ex.unwatch`` ends the
    watch (the settle stage calls it).
    """
    task = asyncio.current_task()

    def lost() -> None:
        if not ex.complete and task is not None:
            ex.disconnected = True
            task.cancel()

    register = scope.get("extensions", {}).get(DISCONNECT_EXTENSION)
    if register is not None:
        register(lost)
        ex.unwatch = lambda: register(None)
        return

    async def watch() -> None:
        message = await receive()
        if message["type"] == "http.disconnect":
            lost()

    ex.unwatch = asyncio.ensure_future(watch()).cancel


def _body_was_invalid(scope: Scope) -> bool:
    """Whether the server answered 400 for a body it could not parse (``ClientGone`` then
    stands for that answer, not for a client that left)."""
    invalid = scope.get("extensions", {}).get(INVALID_BODY_EXTENSION)
    return invalid is not None and bool(invalid())


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


async def _end_cut(
    send: Send,
    ex: Exchange,
    error: GatewayError,
    scope: Scope,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Answer a request the gateway cut off (its credential revoked, its borrowed seat
    reclaimed): ``error`` before any byte, or as a stream's last event (no ``[DONE]``);
    after part of a plain answer, only the connection's end can follow."""
    if not ex.responded:
        ex.status = error.status
        await _send_error(send, error, ex, extra)
    elif ex.stream and ex.status == 200:
        tail = b"data: " + error.body() + b"\n\n"
        await send({"type": "http.response.body", "body": tail, "more_body": False})
    else:
        _abort_connection(scope)


_PREEMPTED = "This request borrowed capacity that its owner reclaimed; try again later."


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
