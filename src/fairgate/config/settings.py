"""The mapping sections of the configuration: listeners, limits, timeouts and back ends.

Every key has a default, so a section may be left out. Durations are float
seconds, sizes are bytes.
"""

from __future__ import annotations

import re
import warnings
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)
from pydantic import model_validator as _model_validator

from fairgate.config.fields import (
    Count,
    Name,
    NonNegativeDuration,
    Port,
    PositiveDuration,
    Section,
    Size,
)
from fairgate.config.secrets import SecretRef
from fairgate.config.tls import AdminTls, ListenerTls

__all__ = [
    "Accounting",
    "AdminListen",
    "Admission",
    "Alerts",
    "Auth",
    "Band",
    "BreakerSettings",
    "CacheIsolation",
    "Fairshare",
    "Health",
    "Landing",
    "Limits",
    "Listen",
    "Logging",
    "ProxySettings",
    "Routing",
    "Smtp",
    "State",
    "Store",
    "Tags",
    "Webhook",
]

_KiB = 1024
_MiB = 1024 * 1024
DEFAULT_STORE_URL = "sqlite:///fairgate.db"
DEFAULT_JOURNAL = "fairgate-journal"
_PASSWORD_PARAM = re.compile(r"pass(word|wd)?$", re.IGNORECASE)


class Listen(Section):
    """A listening socket: ``host`` (an address or name), ``port`` (0 = any free port) and
    ``tls`` (HTTPS when set, see docs/tls.md)."""

    host: Name = "0.0.0.0"  # noqa: S104 - the client listener is meant to be reachable
    port: Port = 8080
    tls: ListenerTls | None = None


class AdminListen(Listen):
    """The admin listener (admin API, /metrics, health): loopback unless an operator opens it."""

    host: Name = "127.0.0.1"
    port: Port = 8081
    tls: AdminTls | None = None


class Limits(Section):
    """Bounds on one request: sizes in bytes, deadlines in seconds, caps on sampling."""

    max_body_bytes: Size = 32 * _MiB
    max_header_bytes: Size = 64 * _KiB
    connect_timeout: PositiveDuration = 5.0
    headers_timeout: PositiveDuration = 60.0
    first_token_timeout: PositiveDuration = 120.0
    idle_timeout: PositiveDuration = 30.0
    total_timeout: PositiveDuration = 1800.0
    max_response_bytes: Size = 64 * _MiB
    stream_buffer_bytes: Size = 1 * _MiB
    max_n: Count = 8
    max_tokens: Count | None = None
    default_max_tokens: Count = 4096
    max_prompts: Count = 16
    max_grammar_bytes: Size = 64 * _KiB
    client_head_timeout: PositiveDuration = 10.0
    client_body_timeout: PositiveDuration = 60.0
    client_keep_alive_timeout: PositiveDuration = 15.0
    max_connections: Count = 1024
    max_connections_per_network: Count | None = 256
    slow_reader_timeout: PositiveDuration = 30.0


class Accounting(Section):
    """The usage recorder: ``queue_capacity`` records wait in memory for the store at most;
    ``journal_path`` (a directory; relative to the configuration file, default
    ``fairgate-journal`` beside it; ``null`` turns the journal off) keeps each record
    on local disk until the store has it, at most ``journal_max_bytes``;
    ``retention`` (a duration, ``null`` keeps records forever) prunes older records."""

    queue_capacity: Count = 10_000
    journal_path: Path | None = None
    journal_max_bytes: Size = 256 * _MiB
    retention: PositiveDuration | None = None

    @_model_validator(mode="before")
    @classmethod
    def _default_journal(cls, data: Any, info: ValidationInfo) -> Any:
        # Only a configuration read from a file has a default journal: beside that file.
        base = info.context.get("base_dir") if isinstance(info.context, dict) else None
        if isinstance(data, dict) and "journal_path" not in data and base is not None:
            return {**data, "journal_path": Path(base) / DEFAULT_JOURNAL}
        return data

    @field_validator("journal_path", mode="before")
    @classmethod
    def _relative_to_config(cls, value: Any, info: ValidationInfo) -> Any:
        base = info.context.get("base_dir") if isinstance(info.context, dict) else None
        if isinstance(value, str) and not value.strip():
            raise ValueError("expected a directory path or null")
        if isinstance(value, str | Path) and base is not None and not Path(value).is_absolute():
            return Path(base) / value
        return value


class ProxySettings(Section):
    """Retries on another replica (0 disables) and the grace period for open streams at shutdown."""

    retries: StrictInt = Field(default=2, ge=0, le=100)
    shutdown_grace: NonNegativeDuration = 30.0


class Health(Section):
    """Active health checks of upstreams: how often, how long one check may take, and how
    many failed (passed) checks in a row take a replica out of routing (bring it back)."""

    interval: PositiveDuration = 5.0
    timeout: PositiveDuration = 2.0
    unhealthy_after: Count = 2
    healthy_after: Count = 1


class BreakerSettings(Section):
    """Circuit breaker per upstream: consecutive failures that open it, backoff before a probe."""

    failures: Count = 3
    backoff_initial: PositiveDuration = 1.0
    backoff_max: PositiveDuration = 60.0

    @field_validator("backoff_max")
    @classmethod
    def _not_below_initial(cls, value: float, info: ValidationInfo) -> float:
        initial = info.data.get("backoff_initial")
        if isinstance(initial, float) and value < initial:
            raise ValueError("must not be shorter than breaker.backoff_initial")
        return value


with warnings.catch_warnings():
    # `json` is the key operators write; BaseModel.json() is a deprecated method it replaces.
    warnings.filterwarnings("ignore", message='Field name "json"', category=UserWarning)

    class Logging(Section):
        """Log level and format (``json: true`` writes one JSON object per line)."""

        level: Literal["debug", "info", "warning", "error"] = "info"
        json: StrictBool = False  # type: ignore[assignment]


class Store(Section):
    """The durable store: exactly one of ``url`` (no password in it) or ``url_file``."""

    url: str | None = None
    url_file: SecretRef | None = None

    @_model_validator(mode="before")
    @classmethod
    def _default_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and "url" not in data and "url_file" not in data:
            return {**data, "url": DEFAULT_STORE_URL}
        return data

    @field_validator("url")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if not parts.scheme.startswith(("sqlite", "postgresql")):
            raise ValueError("expected a sqlite:/// or postgresql:// URL")
        if parts.password is not None or _query_password(parts.query):
            raise ValueError(
                "the URL holds a password: write the URL to a file and set store.url_file"
            )
        return value

    @field_validator("url_file")
    @classmethod
    def _exactly_one(cls, value: SecretRef | None, info: ValidationInfo) -> SecretRef | None:
        if value is not None and info.data.get("url") is not None:
            raise ValueError("set store.url or store.url_file, not both")
        return value


def _query_password(query: str) -> bool:
    """Whether a URL query names a password (``?password=``, ``?sslpassword=``), as
    libpq and asyncpg accept it: the same secret as ``user:password@``, in another place."""
    names = (name for name, _ in parse_qsl(query, keep_blank_values=True))
    return any(_PASSWORD_PARAM.search(name) for name in names)


def _sentinel_address(value: str) -> str:
    """``host:port`` (``[v6]:port`` for an IPv6 address), as a Sentinel is reached."""
    wrong = ValueError(f"'{value}' is not host:port (e.g. 10.0.0.5:26379)")
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        raise wrong from None
    if not parts.hostname or not port or parts.username or parts.path or parts.query:
        raise wrong
    return value


SentinelAddress = Annotated[StrictStr, AfterValidator(_sentinel_address)]


class State(Section):
    """Where shared counters live: ``memory`` (one process) or ``redis`` (needs ``url_file``),
    and how the limits behave around them.

    ``timeout`` bounds every Redis call; ``wait_timeout`` how long a call waits for its
    turn when a burst keeps the most calls this gateway has in flight busy (not counted
    as a Redis failure); ``lease_ttl`` is how long a dead gateway's
    in-flight slots outlive it; ``fail_open`` serves requests without limits while the
    back end is down (default: refuse with 503); ``day_zone`` is the IANA zone whose
    midnight ends a requests-per-day window; ``default_completion_tokens`` is the
    output reserved on a route that has no output-cap field (audio transcription);
    ``budget_refresh`` is how often budgets are re-read from the store;
    ``snapshot_interval`` is how often the memory back end's rate counters are saved
    to the store (and restored from it at start-up); ``response_ttl`` is how long the
    gateway remembers which scope received a Responses API id (``previous_response_id``).

    High availability: ``sentinels`` (``host:port`` of each Redis Sentinel) with
    ``service_name`` (the name the Sentinels monitor) make the gateway ask the
    Sentinels for the current primary, and again after a failover. ``url_file`` is
    then optional: its password, user name, database number and ``rediss://``
    scheme apply to the primary, its host and port are ignored.
    ``sentinel_password_file`` holds the Sentinels' own password, when they have one.
    """

    backend: Literal["memory", "redis"] = "memory"
    sentinels: tuple[SentinelAddress, ...] = ()
    service_name: Name | None = Field(default=None, validate_default=True)
    url_file: SecretRef | None = Field(default=None, validate_default=True)
    sentinel_password_file: SecretRef | None = None
    prefix: Name = "fairgate:"
    timeout: PositiveDuration = 0.5
    wait_timeout: PositiveDuration = 5.0
    lease_ttl: PositiveDuration = 30.0
    fail_open: StrictBool = False
    day_zone: Name = "UTC"
    default_completion_tokens: StrictInt = Field(default=256, ge=0, le=10_000_000)
    budget_refresh: PositiveDuration = 10.0
    snapshot_interval: PositiveDuration = 30.0
    response_ttl: PositiveDuration = 86400.0

    @field_validator("day_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone '{value}' (an IANA name such as 'Europe/Paris')"
            ) from None
        return value

    @field_validator("url_file")
    @classmethod
    def _required_for_redis(cls, value: SecretRef | None, info: ValidationInfo) -> SecretRef | None:
        located = info.data.get("sentinels", True)  # (refused sentinels: one message is enough)
        if value is None and info.data.get("backend") == "redis" and not located:
            raise ValueError(
                "required with backend 'redis' (a file holding the Redis URL), unless "
                "state.sentinels names the Sentinels that know the primary"
            )
        return value

    @field_validator("sentinels")
    @classmethod
    def _sentinels_need_redis(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if value and info.data.get("backend") != "redis":
            raise ValueError("Sentinels locate a Redis primary: set state.backend: redis")
        if len(set(value)) != len(value):
            raise ValueError("a Sentinel is listed twice")
        return value

    @field_validator("service_name")
    @classmethod
    def _service_with_sentinels(cls, value: str | None, info: ValidationInfo) -> str | None:
        if "sentinels" not in info.data:  # already refused: one message is enough
            return value
        sentinels = info.data["sentinels"]
        if sentinels and value is None:
            raise ValueError("required with state.sentinels (the name the Sentinels monitor)")
        if value is not None and not sentinels:
            raise ValueError("only with state.sentinels")
        return value


class Fairshare(Section):
    """Usage decay: past usage counts half as much after each ``half_life`` (default 7 days).

    ``send_priority``: the fair-share priority goes to engines that take one (vLLM's
    ``X-Vllm-Priority``; vLLM must run with ``--scheduling-policy priority``). Set it
    false for a vLLM on the default ``fcfs`` policy: the admission queue then orders
    waiting requests by the same priority instead.

    ``hold_borrowers``: while a pool is full, borrowers wait in the gateway (at most
    ``queue_size`` per pool, each at most ``queue_ttl``) and get their priority when
    dispatched, each engine keeping ``engine_queue_depth`` requests waiting beyond its
    batch (``auto``: a quarter of its learned batch capacity); false sends every
    request to the engines at once.

    ``reclaim_after``: a within-share request that waited this long on a replica whose
    seats this gateway's borrowers hold, while the engine has requests waiting, makes
    the gateway preempt borrowers there (``proxy.reclaim``); null turns reclaim off.
    """

    half_life: PositiveDuration = 168 * 3600.0
    send_priority: StrictBool = True
    hold_borrowers: StrictBool = True
    engine_queue_depth: Annotated[StrictInt, Field(ge=0, le=100_000)] | Literal["auto"] = "auto"
    queue_size: StrictInt = Field(default=1000, ge=0)
    queue_ttl: PositiveDuration = 30.0
    reclaim_after: PositiveDuration | None = 5.0


class Band(Section):
    """A priority band: admitted while pool saturation is below ``ceiling`` (> 0; above 1.0
    never held); ``teams`` are the teams whose keys it serves."""

    name: Name
    ceiling: StrictFloat = Field(gt=0)
    teams: tuple[Name, ...] = ()


class Admission(Section):
    """The admission queue: ``queue_size`` waiting requests per band at most, each for
    ``queue_ttl``; ``bands`` from the top, each ceiling at most the one above; a team in
    at most one band, the others in ``default_band`` (the lowest when unset)."""

    queue_size: StrictInt = Field(default=1000, ge=0)
    queue_ttl: PositiveDuration = 30.0
    bands: tuple[Band, ...] = ()
    default_band: Name | None = None
    kv_limit: StrictFloat = Field(default=0.9, gt=0, le=1)
    replica_capacity: StrictInt | None = Field(default=None, ge=1, le=100_000)

    @field_validator("bands")
    @classmethod
    def _ordered_and_disjoint(cls, bands: tuple[Band, ...]) -> tuple[Band, ...]:
        owner: dict[str, str] = {}
        for above, band in pairwise(bands):
            if band.ceiling > above.ceiling:
                raise ValueError(
                    f"band '{band.name}' has a higher ceiling than '{above.name}' above it"
                )
        for band in bands:
            for team in band.teams:
                if team in owner:
                    raise ValueError(f"team '{team}' is in bands '{owner[team]}' and '{band.name}'")
                owner[team] = band.name
        return bands

    @field_validator("default_band")
    @classmethod
    def _known_band(cls, value: str | None, info: ValidationInfo) -> str | None:
        bands = info.data.get("bands")
        if value is not None and bands is not None and value not in {b.name for b in bands}:
            raise ValueError(f"no band is called '{value}'")
        return value


class CacheIsolation(Section):
    """Prefix-cache isolation between tenants: the ``scope`` salted apart and the HMAC key."""

    scope: Literal["org", "team", "key", "none"] = "org"
    key_file: SecretRef | None = None


class Routing(Section):
    """Request features routing reads: ``session_header`` names the client header whose
    value keeps a conversation on one replica (the key id when absent);
    ``log_decisions`` writes one debug line per request with the routing rationale;
    ``fair_share`` sends a pool's within-share requests where their seats are free and
    its borrowers where they displace nothing (the ``fair-share`` filter), false: affinity
    and load alone choose."""

    session_header: Name = "x-session-id"
    log_decisions: StrictBool = False
    fair_share: StrictBool = True

    @field_validator("session_header")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class Tags(Section):
    """Request tags for budgets and reports: ``header`` is the one request header read
    for them (comma-separated, at most ``max_per_request``); ``allowed`` lists the tag
    values every organisation's keys may send in it, besides the organisation's own
    ``orgs[].tags`` (any other: 400)."""

    header: Name = "x-fairgate-tags"
    max_per_request: StrictInt = Field(default=8, ge=0, le=64)
    allowed: tuple[Name, ...] = ()

    @field_validator("header")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()


class Webhook(Section):
    """A JSON POST per alert to ``url``, with ``Authorization: Bearer`` from ``token_file``."""

    url: str
    token_file: SecretRef | None = None
    timeout: PositiveDuration = 5.0

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).hostname:
            raise ValueError("must be an http:// or https:// URL")
        return value


class Smtp(Section):
    """An e-mail per alert through an SMTP relay at ``host``:``port``."""

    host: Name
    port: Port = 25
    sender: Name
    recipients: tuple[Name, ...] = Field(min_length=1)
    starttls: StrictBool = False
    username: Name | None = None
    password_file: SecretRef | None = None
    timeout: PositiveDuration = 10.0


class Alerts(Section):
    """Where soft-limit alerts go (one per budget and period): a webhook, e-mail, or both."""

    webhook: Webhook | None = None
    smtp: Smtp | None = None


class Auth(Section):
    """Virtual-key authentication: the key cache, the failure limits and the lookup ceiling.

    Every process reads the store's access-change feed every
    ``change_poll_interval`` (and at once on PostgreSQL's NOTIFY or a Redis
    message), so a revoked key stops working everywhere within that interval;
    ``key_cache_ttl`` is only the backstop, for a process that cannot read the
    feed. The failure limits and the lookup ceiling apply to each listener
    separately. ``key_pepper_file`` (at least 32 bytes) makes the store keep
    HMAC-SHA-256(pepper, secret) of keys and admin tokens instead of SHA-256
    (``fairgate.auth.pepper``); it is read once, at start.
    """

    key_cache_ttl: PositiveDuration = 30.0
    change_poll_interval: PositiveDuration = 0.5
    key_cache_size: StrictInt = Field(default=100_000, ge=1, le=10_000_000)
    miss_cache_ttl: PositiveDuration = 30.0
    miss_cache_size: StrictInt = Field(default=100_000, ge=1, le=10_000_000)
    failures_per_minute: StrictInt = Field(default=60, ge=0, le=1_000_000)
    failure_networks_max: StrictInt = Field(default=100_000, ge=1, le=10_000_000)
    failures_per_minute_ipv4_24: StrictInt = Field(default=600, ge=0, le=1_000_000)
    failures_per_minute_ipv6_48: StrictInt = Field(default=600, ge=0, le=1_000_000)
    failures_per_minute_ipv6_32: StrictInt = Field(default=6000, ge=0, le=1_000_000)
    lookups_per_minute: StrictInt = Field(default=6000, ge=0, le=10_000_000)
    key_pepper_file: SecretRef | None = None

    @field_validator("change_poll_interval")
    @classmethod
    def _within_a_second(cls, value: float) -> float:
        if value > 1.0:
            raise ValueError("must be at most 1s: revocations reach every process within it")
        return value


class Landing(Section):
    """The landing page: ``contact`` (an e-mail address, an http(s) URL or plain text)."""

    contact: Name | None = None
