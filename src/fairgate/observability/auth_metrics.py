"""Authentication refusals and key-store lookups as Prometheus metrics, per listener.

    fairgate_auth_refusals_total{listener, reason}   requests refused by authentication:
        missing_credential, malformed, invalid (the store or the miss cache refused the
        credential), network_limit and lookup_ceiling (429, no lookup), store_unavailable,
        address_not_allowed (a valid key from outside one of its IP allowlists, 403)
    fairgate_auth_lookups_total{listener, outcome}   store lookups of credentials made:
        valid, invalid, unavailable
    fairgate_auth_access_changes_total{outcome}      rows of the store's access-change feed:
        applied (cached keys dropped), read_failed (a read the store did not answer)

``listener`` is ``client`` or ``admin``. Label values are fixed names, so the
series are bounded. ``for_listener`` hands out the observer one listener's
guard reports to (``fairgate.auth.AuthObserver``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["AuthMetrics"]


class AuthMetrics:
    """Registers the authentication families on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._refusals = Counter(
            "fairgate_auth_refusals",
            "Requests refused by authentication, by listener and reason",
            ["listener", "reason"],
            registry=registry,
        )
        self._lookups = Counter(
            "fairgate_auth_lookups",
            "Key-store lookups of presented credentials, by listener and outcome",
            ["listener", "outcome"],
            registry=registry,
        )
        self._changes = Counter(
            "fairgate_auth_access_changes",
            "Rows of the access-change feed applied, and feed reads that failed",
            ["outcome"],
            registry=registry,
        )

    def changes_applied(self, count: int) -> None:
        self._changes.labels("applied").inc(count)

    def change_read_failed(self) -> None:
        self._changes.labels("read_failed").inc()

    def for_listener(self, listener: str) -> ListenerAuthMetrics:
        """The observer of ``listener``'s guard."""
        return ListenerAuthMetrics(self._refusals, self._lookups, listener)


class ListenerAuthMetrics:
    """One listener's authentication counters (implements ``fairgate.auth.AuthObserver``)."""

    def __init__(self, refusals: Counter, lookups: Counter, listener: str) -> None:
        self._refusals = refusals
        self._lookups = lookups
        self._listener = listener

    def refused(self, reason: str) -> None:
        self._refusals.labels(self._listener, reason).inc()

    def looked_up(self, outcome: str) -> None:
        self._lookups.labels(self._listener, outcome).inc()
