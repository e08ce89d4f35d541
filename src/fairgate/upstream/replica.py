"""One replica of one model: where it is, how to talk to it, and what is known of it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from yarl import URL

from fairgate.core.breaker import Breaker
from fairgate.core.replica import ReplicaSnapshot
from fairgate.engines import EngineAdapter, EngineLoad

__all__ = ["Replica"]

_NO_LOAD = EngineLoad()


class Replica:
    """A running engine serving ``model`` at ``url`` (from configuration only).

    Live state, written by the replica layer and the proxy on one event loop:

    - ``in_flight``: requests the gateway has sent and not yet finished
      (counted by the gateway itself, see ``ReplicaRegistry.lease``);
    - ``healthy``: the active health checks' verdict. A replica starts
      *unknown*, which counts as healthy so that a fresh gateway serves at
      once; ``unhealthy_after`` failed checks in a row take it out and
      ``healthy_after`` passed ones bring it back (``health_known`` tells
      whether any check has answered yet);
    - ``load``/``load_at``: the last scraped engine load and when it was read
      (seconds on ``clock``); ``snapshot()`` exposes it only while fresh;
    - ``breaker``: fed by real request outcomes only;
    - ``within_share``/``borrowing``: the part of ``in_flight`` admitted within
      its organisation's reservation, and borrowing (``ReplicaRegistry.lease``);
    - ``seats``: this replica's part of its fair-share pool's capacity, set by
      the gateway (``None`` outside fair share).
    """

    def __init__(
        self,
        name: str,
        model: str,
        url: str,
        weight: int,
        internal_key: str | None,
        adapter: EngineAdapter,
        breaker: Breaker,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        base = URL(url)
        if base.scheme not in ("http", "https") or not base.host:
            raise ValueError(f"replica {name!r}: url must be http(s)://host[:port][/prefix]")
        if base.user or base.password or base.query_string or base.fragment:
            raise ValueError(f"replica {name!r}: url may not hold credentials, query or fragment")
        if weight < 1:
            raise ValueError(f"replica {name!r}: weight must be at least 1")
        self.name = name
        self.model = model
        self.url = str(base).rstrip("/")
        self.weight = weight
        self.internal_key = internal_key
        self.adapter = adapter
        self.breaker = breaker
        self.host_header = _host_header(base)
        # The parts the hot-path client needs, taken apart once.
        self.host = base.raw_host or ""
        self.port = base.port or (443 if base.scheme == "https" else 80)
        self.tls = base.scheme == "https"
        self.prefix = base.raw_path.rstrip("/").encode("ascii")
        self.in_flight = 0
        self.within_share = 0
        self.borrowing = 0
        self.seats: float | None = None
        self.healthy = True
        self.health_known = False
        self._health_streak = 0  # checks in a row that disagree with ``healthy``
        self.load: EngineLoad | None = None
        self.load_at = 0.0
        self._load_until = 0.0
        self._clock = clock
        self._snapshot: ReplicaSnapshot | None = None
        self._snapshot_of: tuple[Any, ...] | None = None

    def url_for(self, path: str) -> str:
        """The absolute URL of ``path`` (which starts with ``/``) on this replica."""
        if not path.startswith("/"):
            raise ValueError("path must start with '/'")
        return self.url + path

    def set_health(
        self, healthy: bool, *, unhealthy_after: int = 1, healthy_after: int = 1
    ) -> bool:
        """Record one check's verdict; True when it changed ``healthy``.

        ``healthy`` flips only after ``unhealthy_after`` failed checks in a row
        (``healthy_after`` passed ones to come back): one slow answer from a busy
        engine does not take a replica out of routing.
        """
        self.health_known = True
        if healthy == self.healthy:
            self._health_streak = 0
            return False
        self._health_streak += 1
        if self._health_streak < (healthy_after if healthy else unhealthy_after):
            return False
        self._health_streak = 0
        self.healthy = healthy
        return True

    def record_load(self, load: EngineLoad, *, fresh_for: float) -> None:
        """Store a scraped load, to be trusted for ``fresh_for`` seconds."""
        now = self._clock()
        self.load = load
        self.load_at = now
        self._load_until = now + fresh_for

    def mark_load_stale(self) -> None:
        self.load = None
        self._load_until = 0.0

    def fresh_load(self) -> EngineLoad | None:
        """The scraped load if younger than its ``fresh_for``, else ``None``."""
        if self.load is None or self._clock() >= self._load_until:
            return None
        return self.load

    def engine_waiting(self) -> float | None:
        """The engine's waiting requests from a fresh scrape; None when unknown or stale."""
        load = self.fresh_load()
        return None if load is None else load.waiting

    def snapshot(self) -> ReplicaSnapshot:
        """What routing and admission see of this replica now (stale load hidden).

        The last snapshot is handed out again while nothing it shows has
        changed: routing takes one per replica per request, and a frozen
        dataclass costs about a microsecond to build.
        """
        # Six times a request: ``fresh_load`` written out, and a closed breaker (nearly
        # always) answers without reading its clock.
        load = self.load
        if load is not None and self._clock() >= self._load_until:
            load = None
        breaker = self.breaker
        state = (
            self.in_flight,
            self.healthy,
            breaker.state != "closed" and breaker.blocked(),
            load,
            self.within_share,
            self.borrowing,
            self.seats,
        )
        if state == self._snapshot_of and self._snapshot is not None:
            return self._snapshot
        shown = load or _NO_LOAD
        snapshot = ReplicaSnapshot(
            self.name,
            self.model,
            self.weight,
            state[1],
            state[2],
            state[0],
            shown.running,
            shown.waiting,
            shown.kv_usage,
            self.within_share,
            self.borrowing,
            self.seats,
        )
        self._snapshot, self._snapshot_of = snapshot, state
        return snapshot

    def __repr__(self) -> str:
        return f"Replica({self.model}/{self.name} {self.url} in_flight={self.in_flight})"


def _host_header(url: URL) -> bytes:
    host = url.raw_host or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    if url.explicit_port is not None:
        host = f"{host}:{url.explicit_port}"
    return host.encode("ascii")  # yarl's raw_host is already IDNA-encoded
