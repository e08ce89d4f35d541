"""SCIM provisioning as Prometheus metrics.

fairgate_scim_requests_refused_total{reason}   refused provider requests: bad_token (no,
                                               or a wrong, bearer token), rate_limited
fairgate_scim_changes_total{change}            what reconciliations did: user_created,
                                               user_enabled, user_disabled, sessions_closed,
                                               role_granted, role_removed
fairgate_scim_unknown_teams_total              mapped roles skipped, their team not in the
                                               store (each reconciliation counts them again)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["ScimMetrics"]


class ScimMetrics:
    """Registers the families on ``registry``; the SCIM endpoints and reconciliation count here."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._refused = Counter(
            "fairgate_scim_requests_refused",
            "SCIM requests refused before any resource was read, by reason",
            ["reason"],
            registry=registry,
        )
        self._changes = Counter(
            "fairgate_scim_changes",
            "Changes SCIM reconciliation made to users, sessions and role bindings",
            ["change"],
            registry=registry,
        )
        self._unknown_teams = Counter(
            "fairgate_scim_unknown_teams",
            "Mapped roles a reconciliation skipped because their team is not in the store",
            registry=registry,
        )

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def changed(self, change: str, count: int = 1) -> None:
        if count:
            self._changes.labels(change).inc(count)

    def unknown_team(self) -> None:
        self._unknown_teams.inc()
