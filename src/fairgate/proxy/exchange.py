"""One request's state, passed down the pipeline: a single typed object, not a bag.

``Reservation``, what the request may consume, is defined here beside the ``Exchange``
that holds it; ``proxy.reservation`` decides it and charges it (and re-exports it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fairgate.accounting.journal import INTERRUPTED as _INTERRUPTED
from fairgate.core.errors import GatewayError
from fairgate.core.money import Money
from fairgate.core.principal import Principal
from fairgate.limits.estimate import estimate_tokens
from fairgate.proxy.usage import Usage

__all__ = ["Exchange", "Outcome", "Reservation"]

_FREE = Money(0)


@dataclass(frozen=True, slots=True)
class Reservation:
    """The tokens a request is admitted for: the most it can be charged per attempt
    (``proxy.reservation``).

    It is a ``TokenCounts`` (none of its prompt is cached), so its cost is priced
    without building a usage first."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: ClassVar[int] = 0

    @property
    def tokens(self) -> int:
        """Prompt and completion together, at least 1 (what the token limits count)."""
        return estimate_tokens(self.prompt_tokens, self.completion_tokens)

    def usage(self, attempts: int = 1) -> Usage:
        """The reservation as a flagged usage, ``attempts`` times over."""
        return Usage(
            self.prompt_tokens * attempts, self.completion_tokens * attempts, 0, estimated=True
        )


class Outcome:
    """How a request ended, as recorded (one word each, stable for reports)."""

    OK = "ok"  # the engine's answer was relayed whole (whatever its status)
    REFUSED = "refused"  # the gateway answered itself (4xx/5xx) without an upstream answer
    UPSTREAM_ERROR = "upstream_error"  # no usable answer from any replica
    TIMEOUT = "timeout"  # a deadline fired
    TRUNCATED = "truncated"  # the engine broke a stream off after the first byte
    CLIENT_ABORT = "client_abort"  # the client went away; the upstream was cancelled
    SLOW_READER = "slow_reader"  # the client fell too far behind and was cut off
    # the credential it was admitted with stopped being valid while it ran (a key revoked,
    # its team or organisation disabled): cut, its upstream cancelled (proxy.in_flight)
    REVOKED = "revoked"
    PREEMPTED = "preempted"  # a borrower the gateway preempted for its seat's owner (proxy.reclaim)
    # the gateway process stopped (a kill, a crash) while the request was in flight: its
    # record comes from the write-ahead entry (accounting.journal), charged the reservation
    INTERRUPTED = _INTERRUPTED


@dataclass(slots=True)
class Exchange:
    request_id: str
    method: str
    path: str
    started: float  # monotonic
    client: str = ""
    principal: Principal | None = None
    endpoint: str = ""
    model: str = ""  # canonical name of the model that served (after fallback)
    requested_model: str = ""  # canonical name of the model asked for
    client_model: str = ""  # the name the client used (may be an alias)
    stream: bool = False
    client_wants_usage: bool = False
    prompt_bytes: int = 0
    reservation: Reservation | None = None  # what the request may consume (proxy.reservation)
    output_caps: dict[str, int | None] = field(default_factory=dict)  # per candidate model
    sequences: int = 1  # the sequences the engine runs (prompts × choices; reserve)
    stops: int = 0  # llama-server stop events relayed: one per sequence of a batch
    # each usage the engine reports counts one of ``sequences`` only (llama-server's
    # OpenAI routes, ``EndpointKind.usage_per_sequence``): a stream's add up, a plain
    # answer's is short (proxy.relay)
    per_sequence: bool = False
    chain: tuple[str, ...] = ()  # the models that may serve it, the one asked for first
    parsed: dict[str, Any] | None = None
    body: bytes = b""
    body_unread: bool = False  # the request announces a body not read (yet): close after
    content_type: bytes | None = None
    accept: bytes | None = None
    accept_encoding: bytes | None = None  # the client's, passed on for plain answers
    session: bytes | None = None  # the session header's value, for routing affinity
    credentials: int = 0  # Authorization, x-api-key and api-key headers seen: more than one, 401
    tags: tuple[str, ...] | None = None  # the key's tags and the request's (None: the key's)
    priority: int | None = None  # the fair-share priority sent to the engine
    cache_salt: str | None = None  # the tenant's prefix-cache salt (vLLM), set by the gateway
    replica: str = ""
    attempts: int = 0
    # the model of each attempt that reached an engine and got no answer: charged its
    # reservation at that model's prices (proxy.reservation, proxy.settle)
    unanswered: tuple[str, ...] = ()
    status: int = 0
    outcome: str = Outcome.OK
    reason: str = ""  # server-side reason for a failure (logged, never sent)
    first_byte_at: float | None = None
    finished: float | None = None
    upstream_time: float = 0.0  # seconds spent waiting on upstreams
    content_events: int = 0
    usage: Usage | None = None  # what the request is charged, once settled (proxy.reservation)
    # ``usage`` is a count so far (vLLM's continuous_usage_stats on token events, the
    # ended sequences of a llama-server batch): final only once the stream's terminal
    # event came (``ending``)
    usage_so_far: bool = False
    usage_gap: bool = False  # a sequence ended without its counts: ``usage`` is short
    cost: Money = _FREE  # what ``usage`` costs, each part at its model's prices (proxy.settle)
    # the cost per model when unanswered attempts were on another model (else None)
    costs: dict[str, Money] | None = None
    sent_priority: int | None = None  # the priority the last attempt sent (none: not sent)
    disconnected: bool = False  # the client went away while the request ran
    # the refusal its credential now gets: the request is being cut (proxy.in_flight)
    revoked: GatewayError | None = None
    # preempted by fair-share reclaim (proxy.reclaim): the Retry-After seconds its answer says
    preempted: float | None = None
    complete: bool = False  # the request is settling: a disconnect no longer cancels it
    recorded: bool = False  # charged, priced and recorded (proxy.settle: at its answer's end)
    released: bool = False  # gave back its places before the settle (``Settler.release``)
    intent: int | None = None  # the journal segment of its write-ahead entry (proxy.records)
    ending: bool = False  # the next message carries the stream's terminal event (proxy.relay)
    unwatch: Callable[[], object] | None = None  # ends the disconnect watch (proxy.pipeline)
    upstream_bodies: dict[str, bytes] = field(default_factory=dict)  # per candidate model

    @property
    def responded(self) -> bool:
        """True once a byte reached the client: from then on, no retry and no fallback."""
        return self.first_byte_at is not None
