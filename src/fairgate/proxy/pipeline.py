"""The hot path, stage by stage; the code of each stage is in its own module.

    identify   auth (``authenticate``), before the path is even resolved
    read       body, model, tags          proxy/request.py, proxy/endpoints.py, proxy/tags.py
    limit      rate limits and budgets    proxy/limit.py
    admit      admission lease, then the fair-share claim   proxy/admit.py
    route      pick a replica, retry      proxy/forward.py
    relay      the attempt                proxy/relay.py (through proxy/forward.py)
    settle     charge, give back, record  proxy/settle.py (Admit.leave, Limit.leave, Admit.finish)

Each stage is a call on an object built once by the Gateway; nothing here reads
the configuration file, the store or the environment. Retries and fallbacks
happen only while nothing has reached the client (``Exchange.responded``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from fairgate.auth import invalid_credential
from fairgate.core.asgi import Receive, Scope, Send
from fairgate.core.client_addr import ClientAddresses
from fairgate.core.errors import BadRequest, GatewayError, NotFound, ServiceUnavailable
from fairgate.core.principal import Principal
from fairgate.core.route_classes import RouteRules, refusal
from fairgate.engines import FieldRefused, is_json
from fairgate.proxy.admit import Admit
from fairgate.proxy.endpoints import EndpointTable, ModelEntry
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.forward import Forwarder, share_headers
from fairgate.proxy.limit import Limit
from fairgate.proxy.relay import SlowReader
from fairgate.proxy.request import Caps, ClientGone, check_caps, parse_json, read_body
from fairgate.proxy.reservation import OutputPolicy
from fairgate.proxy.responses import ResponseScope
from fairgate.proxy.settle import Settler
from fairgate.proxy.sse import error_event
from fairgate.proxy.tags import TagPolicy
from fairgate.proxy.ticket import Ticket
from fairgate.server.protocol import ABORT_EXTENSION, DISCONNECT_EXTENSION

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
        endpoints: EndpointTable,
        caps: Caps,
        output: OutputPolicy,
        forwarder: Forwarder,
        settler: Settler,
        request_ids: Callable[[], str],
        authenticate: Callable[[bytes | None, str], Awaitable[Principal]],
        stopping: Callable[[], bool] = lambda: False,
        limit: Limit | None = None,
        admit: Admit | None = None,
        tags: TagPolicy | None = None,
        salt: Callable[[Principal], str | None] = lambda _p: None,
        session_header: bytes = b"x-session-id",
        responses: ResponseScope | None = None,
        clients: ClientAddresses | None = None,
        rules: RouteRules | None = None,
        exchange: Callable[[bytes | None, str], Awaitable[bytes]] | None = None,
        exchange_path: str = "/v1/auth/exchange",
    ) -> None:
        self._endpoints = endpoints
        self._caps = caps
        self._output = output
        self._forwarder = forwarder
        self._settler = settler
        self._ids = request_ids
        self._stopping = stopping  # true once the server drains: a cancellation is its own
        self._authenticate = authenticate
        self._limit = limit
        self._admit = admit
        self._tags = tags or TagPolicy()
        self._salt = salt
        self._session_header = session_header
        self._tags_header = self._tags.header.encode("latin-1")
        self._responses = responses
        self._clients = clients
        # decided once: without a rule for inference, no request pays for a check
        self._rules = rules if rules is not None and rules.restricts("inference") else None
        self._exchange = exchange
        self._exchange_path = exchange_path

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
        ticket = Ticket()
        try:
            authorization, length, tags = self._scan_headers(scope, ex)
            if self._exchange is not None and scope["path"] == self._exchange_path:
                await self._exchanged(scope, ex, authorization, send)
                return
            principal = await self._identify(ex, authorization)
            route = self._endpoints.resolve_path(scope.get("raw_path") or scope["path"].encode())
            ex.endpoint = route.name
            if route.local is not None and scope["method"] == "GET":
                if self._limit is not None:
                    await self._limit.meter(ex)
                await route.local(scope, ex, send)
                return
            if route.local is not None or scope["method"] != "POST":
                raise NotFound(
                    f"unknown route {scope['method']} {scope['path']}", code="unknown_route"
                )
            if self._limit is not None:
                # before the body: a key the limiter would refuse costs no body's memory
                self._limit.check_head(principal)
            entry = await self._read(receive, ex, length, tags)
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
            await self._settler.settle(ex, ticket)

    async def _identify(self, ex: Exchange, authorization: bytes | None) -> Principal:
        """Before anything else, whatever the path, so no route can be reached without a
        key (unknown paths answer 401 too, not 404)."""
        if self._rules is not None and not self._rules.allows("inference", ex.client):
            log.info("refused %s from %s: not in routes.inference.allow", ex.request_id, ex.client)
            raise refusal()
        if ex.credentials > 1:
            # a key and a token, or two of either: never a silent choice between them
            log.info("refused %s from %s: %d credentials", ex.request_id, ex.client, ex.credentials)
            raise invalid_credential()
        ex.principal = principal = await self._authenticate(authorization, ex.client)
        return principal

    async def _exchanged(
        self, scope: Scope, ex: Exchange, authorization: bytes | None, send: Send
    ) -> None:
        """``POST /v1/auth/exchange``: a workload token for a short-lived key (auth.jwt)."""
        ex.endpoint = "auth_exchange"
        if self._rules is not None and not self._rules.allows("inference", ex.client):
            log.info("refused %s from %s: not in routes.inference.allow", ex.request_id, ex.client)
            raise refusal()
        if ex.credentials > 1:
            raise invalid_credential()
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
                # the first, as the admin API and the metrics door read it; a second
                # one is a second credential, refused by the identify stage
                ex.credentials += 1
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
            elif name == b"x-api-key" or name == b"api-key":
                ex.credentials += 1
        return authorization, length, tags

    async def _read(
        self, receive: Receive, ex: Exchange, length: bytes | None, tags: bytes | None
    ) -> ModelEntry:
        """The read stage: the body (bounded, parsed once, capped), the model it names
        with its reservation and request policies, the tenant's cache salt, and the
        request's tags; returns the model's entry (its chain)."""
        await self._read_body(receive, ex, length)
        entry = self._output.reserve(ex, self._endpoints.model_for(ex))
        _check_fields(ex, entry)
        principal = ex.principal
        assert principal is not None
        ex.cache_salt = self._salt(principal)
        if self._responses is not None:
            await self._responses.check(ex)  # a state read only with previous_response_id
        added = self._tags.apply(principal, tags)
        if added is not None:
            ex.tags = added
        return entry

    async def _read_body(self, receive: Receive, ex: Exchange, length: bytes | None) -> None:
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
            ex.parsed = parsed = parse_json(ex.body)
            check_caps(parsed, self._caps)
            ex.stream = "stream" in parsed and parsed["stream"] is True
            if "stream_options" in parsed:
                options = parsed["stream_options"]
                ex.client_wants_usage = (
                    isinstance(options, dict) and options.get("include_usage") is True
                )


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
