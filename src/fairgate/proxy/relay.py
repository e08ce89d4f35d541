"""One upstream attempt, and the relay of its answer to the client.

An attempt is *open* once the engine's status line and headers arrived and —
for a stream — its first event, or — for a plain answer — its whole body.
Until then nothing has reached the client, so a failure is an ``AttemptFailed``
the pipeline may retry on another replica or a fallback model. Once the relay
starts writing, the answer is committed: a later failure ends the stream with
an error event and no ``[DONE]``, and is recorded as truncated. A stream's
``[DONE]`` (the Responses API's final event, ``response.completed`` …, in its
streams, which have none) ends the client's stream: whatever the engine sends after
it is neither relayed nor read for usage or errors (``Relay._drain``).

Nothing relayed holds the replica's internal key (``proxy.encoding``): a plain
answer is checked whole (decompressed, within ``max_response_bytes``, when it is
compressed), a stream event by event.

Deadlines (all from the configuration's ``limits``):

- connect      TCP connect to the engine                      → 502/504, retried
- headers      request sent → status line and headers          → 504, retried
- first token  headers → first stream event                     → 504, retried
- idle         between two reads of the engine's body           → 504 before the first
                                                                   byte, truncation after
- total        request arrival → last byte                      → 504 / truncation
- slow reader  a write to the client blocked this long          → client cut off,
                                                                   upstream cancelled

An attempt's deadlines are watched by one timer (``proxy.watchdog``), and a stream's
by another: each phase moves the deadline, so a relayed chunk arms no timer of its own.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Gauge

from fairgate.core.asgi import Message, Send
from fairgate.core.errors import BadGateway, GatewayError, GatewayTimeout
from fairgate.proxy.encoding import TooLarge, Undecodable, decode, is_encoded, scrub
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.responses import RESPONSES_ROUTE, ResponseScope
from fairgate.proxy.sse import SseSplitter, classify, error_event
from fairgate.proxy.usage import usage_in_body
from fairgate.proxy.watchdog import Watchdog
from fairgate.upstream import (
    UpstreamConnectError,
    UpstreamConnectTimeout,
    UpstreamError,
    UpstreamPool,
    UpstreamResponse,
    UpstreamTooLarge,
)

__all__ = ["DRAIN_SECONDS", "AttemptFailed", "Deadlines", "Opened", "Relay", "SlowReader", "Target"]

log = logging.getLogger("fairgate.proxy")

_RETRY_STATUSES = frozenset({502, 503, 504})
_DRAIN_BYTES = 64 * 1024
"""What an engine may send after a stream's ``[DONE]`` (dropped) before its connection is
closed rather than kept: a chunked answer's end is 5 bytes."""
DRAIN_SECONDS = 1.0
"""How long after a stream's ``[DONE]`` (or final event) the engine has to end its answer
before its connection is closed rather than kept. An engine ends it in the same write or
the next one; until it does, the request still holds its replica and its places."""
_SSE = b"text/event-stream"


@dataclass(frozen=True, slots=True)
class Deadlines:
    connect: float
    headers: float
    first_token: float
    idle: float
    total: float
    slow_reader: float
    max_response_bytes: int


class Target(Protocol):
    """Where an attempt goes: a replica's address and the internal key its engine wants
    (``upstream.Replica``)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def tls(self) -> bool: ...
    @property
    def internal_key(self) -> str | None: ...


class AttemptFailed(Exception):
    """An attempt failed before anything reached the client.

    ``error`` is what the client gets if no other attempt succeeds; ``answer``,
    when set, is the engine's own failed answer (status, content type, body),
    relayed instead when it is the last one. ``ran`` is true when the engine may
    have generated for the request (it was sent, and no answer says otherwise: a
    ``502`` or ``504`` of a proxy in front of the engine does not, a ``503`` does):
    such an attempt is charged its reservation (``proxy.reservation``).
    ``replica_at_fault`` is false when the failure says nothing about the replica's
    health (the request's own total deadline ran out, a plain answer's headers are
    late, its answer is over the size bound): the replica's breaker forgets the
    attempt instead of counting a failure.
    """

    def __init__(
        self,
        reason: str,
        error: GatewayError,
        *,
        retryable: bool,
        answer: tuple[int, bytes, bytes] | None = None,
        ran: bool = True,
        replica_at_fault: bool = True,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.replica_at_fault = replica_at_fault
        self.error = error
        self.retryable = retryable
        self.answer = answer
        self.ran = ran


class SlowReader(Exception):
    """The client did not accept bytes for longer than the slow-reader deadline."""


@dataclass(slots=True)
class Opened:
    """An attempt past its point of no return. ``body`` is what the client gets: the whole
    answer (relayed with ``coding`` as its ``Content-Encoding`` when set) or a stream's
    first chunk; ``plain`` is a plain answer decompressed, for reading its usage;
    ``key`` is the replica's internal key, scrubbed from everything relayed."""

    response: UpstreamResponse
    status: int
    content_type: bytes
    body: bytes
    streaming: bool
    plain: bytes = b""
    coding: bytes | None = None
    key: bytes | None = None


class Relay:
    """Opens attempts on replicas and relays their answers; one per Gateway."""

    def __init__(
        self,
        deadlines: Deadlines,
        pool: UpstreamPool,
        streams_open: Gauge | None = None,
        responses: ResponseScope | None = None,
    ) -> None:
        self.deadlines = deadlines
        self._pool = pool
        self._streams_open = streams_open
        self._responses = responses  # remembers who received each Responses API id

    def _remaining(self, ex: Exchange, limit: float, *, sent: bool = True) -> float:
        left = ex.started + self.deadlines.total - time.monotonic()
        if left <= 0:
            raise AttemptFailed(
                "total_timeout",
                _total_timeout(),
                retryable=False,
                ran=sent,
                replica_at_fault=False,
            )
        return min(limit, left)

    async def open(
        self,
        ex: Exchange,
        replica: Target,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> Opened:
        """Send the request and read up to the point of no return (see module docstring)."""
        d = self.deadlines
        start = time.monotonic()
        dog = Watchdog(min(d.headers, d.first_token, d.idle))
        try:
            try:
                dog.start(start + self._remaining(ex, d.headers, sent=False))
                response = await self._pool.request(
                    "POST",
                    replica.host,
                    replica.port,
                    target,
                    headers,
                    body,
                    tls=replica.tls,
                )
            except asyncio.CancelledError:
                if not dog.expired():
                    raise
                mine = not _past(ex, d.total)  # the engine's slowness, not the request's
                # An engine sends a plain answer's headers only with the whole answer, as
                # long as the client asked for: only a stream's late headers say the
                # engine is stuck, else one tenant's long answers would open its breaker.
                raise AttemptFailed(
                    "headers_timeout" if mine else "total_timeout",
                    GatewayTimeout("the model did not answer in time"),
                    retryable=mine,
                    replica_at_fault=mine and ex.stream,
                ) from None
            except UpstreamConnectTimeout:
                raise AttemptFailed(
                    "connect_timeout",
                    GatewayTimeout("could not reach the model in time"),
                    retryable=True,
                    ran=False,
                ) from None
            except UpstreamConnectError as exc:
                raise AttemptFailed(
                    "connect_error",
                    BadGateway("could not reach the model"),
                    retryable=True,
                    ran=False,
                ) from exc
            except UpstreamError as exc:
                raise AttemptFailed(
                    "broken_answer", BadGateway("the model broke off its answer"), retryable=True
                ) from exc
            return await self._read_head(ex, response, replica.internal_key, dog)
        finally:
            dog.stop()
            ex.upstream_time += time.monotonic() - start

    async def _read_head(
        self, ex: Exchange, response: UpstreamResponse, internal_key: str | None, dog: Watchdog
    ) -> Opened:
        status = response.status
        content_type = response.header(b"content-type") or b"application/json"
        coding = _coding(response)
        streaming = status == 200 and content_type.startswith(_SSE)
        key = internal_key.encode() if internal_key else None
        content_type = scrub(content_type, key)  # the one engine header relayed
        try:
            if streaming:
                if is_encoded(coding):
                    # asked for as identity: events it cannot read are never relayed
                    raise AttemptFailed(
                        "encoded_stream",
                        BadGateway("the model's answer could not be read"),
                        retryable=False,
                    )
                first = await self._read_first_event(ex, response, dog)
                return Opened(response, status, content_type, first, True, key=key)
            body = await self._read_whole(ex, response, dog)
        except BaseException:
            response.close()
            raise
        response.release()
        plain = self._decoded(body, coding, key)
        if status >= 400 or plain is body or (key and (key in plain or key in body)):
            # sent decompressed: an error answer is relayed (and retried) as plain
            # bytes, and an answer holding the key must be rewritten anyway — also
            # one holding it outside its compressed text (a gzip header's file name
            # or comment goes out as it is, and decompressing drops it)
            body, plain, coding = scrub(plain, key), b"", None
        if status in _RETRY_STATUSES:
            raise AttemptFailed(
                f"upstream_{status}",
                BadGateway("the model failed to answer"),
                retryable=True,
                answer=(status, content_type, body),
                # a 503 is a refusal before any work; a 502 or 504 (a proxy in front of
                # the engine: its connection broke, or its deadline ran out) may come
                # after the engine generated for the request, by an unknown amount
                ran=status != 503,
            )
        return Opened(response, status, content_type, body, False, plain, coding, key)

    def _decoded(self, body: bytes, coding: bytes | None, key: bytes | None) -> bytes:
        """The answer decompressed (``proxy.encoding``), or ``AttemptFailed`` (not retried:
        the engine ran, and the reservation is charged) when it cannot be checked."""
        try:
            return decode(body, coding, self.deadlines.max_response_bytes)
        except TooLarge:
            reason, message, fault = "response_too_large", "the model's answer is too large", False
        except Undecodable:
            reason, message, fault = (
                "undecodable_answer",
                "the model's answer could not be read",
                True,
            )
        # the coding is the engine's text: it may quote the internal key too
        shown = None if coding is None else scrub(coding, key)
        log.warning("an engine answer with Content-Encoding %r was not relayed: %s", shown, reason)
        raise AttemptFailed(reason, BadGateway(message), retryable=False, replica_at_fault=fault)

    async def _read_first_event(
        self, ex: Exchange, response: UpstreamResponse, dog: Watchdog
    ) -> bytes:
        try:
            dog.move(time.monotonic() + self._remaining(ex, self.deadlines.first_token))
            first = await response.read_chunk()
        except asyncio.CancelledError:
            if not dog.expired():
                raise
            mine = not _past(ex, self.deadlines.total)
            raise AttemptFailed(
                "first_token_timeout" if mine else "total_timeout",
                GatewayTimeout("the model produced no output in time"),
                retryable=mine,
                replica_at_fault=mine,
            ) from None
        except (UpstreamError, OSError):
            raise AttemptFailed(
                "broken_stream", BadGateway("the model broke off its answer"), retryable=True
            ) from None
        if not first:
            raise AttemptFailed(
                "empty_stream", BadGateway("the model sent an empty stream"), retryable=True
            )
        return first

    async def _read_whole(self, ex: Exchange, response: UpstreamResponse, dog: Watchdog) -> bytes:
        limit = self.deadlines.max_response_bytes
        declared = response.content_length
        if declared is not None and declared > limit:
            raise AttemptFailed(
                "response_too_large",
                BadGateway("the model's answer is too large"),
                retryable=False,
                replica_at_fault=False,
            )
        try:
            # One deadline for the whole body: engines send a plain answer at once, after
            # the headers, so it must arrive within the idle deadline (and the total).
            dog.move(time.monotonic() + self._remaining(ex, self.deadlines.idle))
            return await response.read_all(limit)
        except UpstreamTooLarge:
            raise AttemptFailed(
                "response_too_large",
                BadGateway("the model's answer is too large"),
                retryable=False,
                replica_at_fault=False,
            ) from None
        except asyncio.CancelledError:
            if not dog.expired():
                raise
            mine = not _past(ex, self.deadlines.total)
            raise AttemptFailed(
                "idle_timeout" if mine else "total_timeout",
                GatewayTimeout("the model stopped answering"),
                retryable=False,
                replica_at_fault=mine,
            ) from None
        except (UpstreamError, OSError):
            raise AttemptFailed(
                "broken_answer", BadGateway("the model broke off its answer"), retryable=True
            ) from None

    # -- after the point of no return -------------------------------------------------

    async def send_whole(
        self, ex: Exchange, opened: Opened, send: Send, extra_headers: list[tuple[bytes, bytes]]
    ) -> None:
        """Relay a plain (non-stream) answer and take its usage (from the decompressed copy
        of a compressed one)."""
        if (
            opened.status == 200
            and opened.content_type.startswith(b"application/json")
            # one sequence's usage stands for all of them: left unread, the reservation
            and not ex.per_sequence
        ):
            ex.usage = usage_in_body(opened.plain or opened.body)
        if self._responses is not None and ex.endpoint == RESPONSES_ROUTE:
            await self._responses.relayed_body(ex, opened.status, opened.plain or opened.body)
        headers = [
            (b"content-type", opened.content_type),
            (b"content-length", str(len(opened.body)).encode()),
            *extra_headers,
        ]
        if opened.coding is not None:
            headers.append((b"content-encoding", opened.coding))
        # No slow-reader deadline here: the answer is in memory already, and a client
        # that never reads it is dropped by the listener's stall timeout.
        ex.status = opened.status  # before the start: its record may be made then
        await send({"type": "http.response.start", "status": opened.status, "headers": headers})
        ex.first_byte_at = time.monotonic()
        await send({"type": "http.response.body", "body": opened.body})

    async def stream(
        self,
        ex: Exchange,
        opened: Opened,
        send: Send,
        extra_headers: list[tuple[bytes, bytes]],
        *,
        strip_usage: bool,
    ) -> None:
        """Relay an SSE stream event by event until the engine ends it or a deadline fires.

        One watchdog holds the deadline of the phase the relay is in: the idle one (and
        the total) while it reads from the engine, the slow-reader one while it writes
        to the client. A chunk of content events only (``SseSplitter.content``), what
        nearly every chunk is, goes out as it came; any other is split into events
        (``_events``)."""
        d = self.deadlines
        response = opened.response
        key = opened.key
        watch = self._responses if ex.endpoint == RESPONSES_ROUTE else None
        splitter = SseSplitter()
        terminal = completed = done = ended_client = False
        headers = [
            (b"content-type", opened.content_type),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *extra_headers,
        ]
        idle, slow, end = d.idle, d.slow_reader, ex.started + d.total
        dog = Watchdog(min(idle, slow))
        if self._streams_open is not None:
            self._streams_open.inc()
        try:
            try:
                dog.start(time.monotonic() + slow)
                head = {"type": "http.response.start", "status": 200, "headers": headers}
                await self._write(dog, send, head)
                ex.first_byte_at = now = time.monotonic()
                ex.status = 200
                chunk = opened.body
                while chunk:
                    events = -1 if watch is not None else splitter.content(chunk)
                    if events >= 0:  # whole events: a key split across reads is caught
                        ex.content_events += events
                        body = scrub(chunk, key)
                    else:
                        body, ended, done, watch = await self._events(
                            ex, splitter, chunk, key, watch, dog, strip_usage=strip_usage
                        )
                        terminal = terminal or ended
                        now = time.monotonic()
                    if body:
                        dog.move(now + slow)
                        try:
                            await send(
                                {"type": "http.response.body", "body": body, "more_body": True}
                            )
                        except asyncio.CancelledError:
                            if dog.expired():
                                raise SlowReader() from None
                            raise
                    if done:  # the client's stream ends here: nothing after it is relayed
                        break
                    start = time.monotonic()
                    at = start + idle
                    dog.move(at if at < end else end)
                    try:
                        chunk = await response.read_chunk()
                    except asyncio.CancelledError:
                        if not dog.expired():
                            raise
                        late = _past(ex, d.total)
                        reason = "total_timeout" if late else "idle_timeout"
                        raise _StreamBroken(Outcome.TIMEOUT, reason) from None
                    except (UpstreamError, OSError, ValueError):
                        raise _StreamBroken(Outcome.TRUNCATED, "engine_broke_stream") from None
                    finally:
                        now = time.monotonic()
                        ex.upstream_time += now - start
                if not terminal and ex.outcome == Outcome.OK:
                    ex.outcome, ex.reason = Outcome.TRUNCATED, "engine_closed_stream"
                completed = True
                if done:
                    # the client's stream ends at ``[DONE]`` (or a Responses API stream's
                    # final event): what the engine sends after it is only read, to keep
                    # its connection, never relayed
                    ended_client = True
                    await self._end(ex, send, dog)
                    completed = await self._drain(ex, response, dog)
            except _StreamBroken as broken:
                ex.outcome, ex.reason = broken.outcome, broken.reason
            finally:
                if self._streams_open is not None:
                    self._streams_open.dec()
                if completed and terminal:
                    response.release()
                else:
                    response.close()  # cancels the engine's work: it sees the connection go
            if not ended_client:
                await self._end(ex, send, dog)
        finally:
            dog.stop()

    async def _drain(self, ex: Exchange, response: UpstreamResponse, dog: Watchdog) -> bool:
        """Whether the engine's answer ended within ``_DRAIN_BYTES`` and ``DRAIN_SECONDS``
        after ``[DONE]`` (and before the idle and total deadlines): then its connection
        can go back to the pool. What arrives is dropped unread: it neither reaches the
        client nor changes the charge (``docs/limits.md``). False closes the connection
        instead."""
        left = _DRAIN_BYTES
        now = time.monotonic()
        end = min(ex.started + self.deadlines.total, now + DRAIN_SECONDS)
        while left >= 0:
            at = time.monotonic() + self.deadlines.idle
            dog.move(at if at < end else end)
            try:
                chunk = await response.read_chunk()
            except asyncio.CancelledError:
                if not dog.expired():
                    raise
                return False
            except (UpstreamError, OSError, ValueError):
                return False
            if not chunk:
                return True
            left -= len(chunk)
        return False

    async def _events(
        self,
        ex: Exchange,
        splitter: SseSplitter,
        chunk: bytes,
        key: bytes | None,
        watch: ResponseScope | None,
        dog: Watchdog,
        *,
        strip_usage: bool,
    ) -> tuple[bytes, bool, bool, ResponseScope | None]:
        """A chunk split into events and each taken for what it is: (what to relay, whether
        the stream's end was among them, whether the client's stream ends with them —
        ``[DONE]``, or the Responses API's final event —, the Responses API watch until it
        has its id). Nothing after that end is taken: not relayed, not read for usage or
        errors."""
        out: list[bytes] = []
        terminal = done = False
        try:
            pieces = splitter.feed(chunk)
        except ValueError:  # one event past the size bound: not an SSE stream we relay
            raise _StreamBroken(Outcome.TRUNCATED, "event_too_large") from None
        for raw in pieces:
            event = classify(raw)
            kind = event.kind
            usage = event.usage
            if usage is not None and ex.per_sequence:
                # one report per sequence: their sum is final once every sequence sent its own
                ex.usage = usage if ex.usage is None else ex.usage.plus(usage)
                ex.stops += 1
                ex.usage_so_far = ex.stops < ex.sequences
            elif usage is not None:
                if ex.usage is None:
                    ex.usage = usage
                elif event.adds:
                    ex.usage = ex.usage.plus(usage)
                else:  # a later report never lowers an earlier one
                    ex.usage = ex.usage.at_least(usage)
                ex.usage_so_far = kind == "content"
            elif event.adds:
                ex.usage_gap = True  # the batch's sum will lack this sequence's counts
            if kind == "content":
                ex.content_events += 1
            elif event.adds and ex.stops + 1 < ex.sequences:
                # one sequence of a llama-server batch ended, the others run on: their
                # usage is still to come (a stream cut off now is charged its reservation)
                ex.stops += 1
                ex.usage_so_far = True
            elif kind == "done" or kind == "final":
                terminal = True
                ex.ending = True  # the client may take it as the end: recorded first
                if ex.per_sequence and ex.usage_so_far:
                    ex.usage_gap = True  # the end came before every sequence's usage
            elif kind == "error":
                ex.outcome = Outcome.TRUNCATED
                ex.reason = "engine_error_event"
            elif kind == "usage" and strip_usage:
                continue
            if watch is not None and b'"response.created"' in raw:
                dog.move(math.inf)  # a store write: none of the stream's deadlines
                await watch.relayed_event(ex, raw)  # before the client can see it
                watch = None
            # an event is whole here, so a key split across reads is caught
            out.append(scrub(raw, key))
            if kind == "done" or (kind == "final" and not event.adds):
                # [DONE], or the Responses API's final event (its streams have none):
                # the client's stream ends here (llama-server's stop events do not: a
                # batch's prompts end one by one, and its OpenAI routes send [DONE])
                done = True
                break
        return (out[0] if len(out) == 1 else b"".join(out)), terminal, done, watch

    async def _end(self, ex: Exchange, send: Send, dog: Watchdog) -> None:
        """The stream's last message: an error event when it broke off (none after the
        engine's own error event), else the end of the body."""
        if ex.outcome in (Outcome.TRUNCATED, Outcome.TIMEOUT):
            tail = (
                b""
                if ex.reason == "engine_error_event"
                else error_event("the model's stream broke off before it ended", "upstream_error")
            )
        elif ex.outcome == Outcome.OK:
            tail = b""
        else:
            return
        dog.move(time.monotonic() + self.deadlines.slow_reader)
        last = {"type": "http.response.body", "body": tail, "more_body": False}
        await self._write(dog, send, last)

    async def _write(self, dog: Watchdog, send: Send, message: Message) -> None:
        """``send`` within the watchdog's deadline (the caller set it), or ``SlowReader``."""
        try:
            await send(message)
        except asyncio.CancelledError:
            if dog.expired():
                raise SlowReader() from None
            raise


class _StreamBroken(Exception):
    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


def _coding(response: UpstreamResponse) -> bytes | None:
    """Every ``Content-Encoding`` line of the answer, as the one list they are together.

    Lines ``identity`` and ``gzip`` mean ``identity, gzip`` (RFC 9110 §5.3): a body read
    by its first line only would pass for plain bytes and go out unscrubbed, for the
    client to decompress. A list is no coding the gateway reads, so it is not relayed.
    """
    values = [value for name, value in response.headers if name == b"content-encoding"]
    return b", ".join(values) if values else None


def _past(ex: Exchange, total: float) -> bool:
    return time.monotonic() >= ex.started + total - 0.001


def _total_timeout() -> GatewayTimeout:
    return GatewayTimeout("the request took longer than the gateway allows")
