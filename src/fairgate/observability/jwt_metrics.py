"""Access tokens as Prometheus metrics.

fairgate_jwt_refusals_total{reason}   access tokens refused (the inference API and
                                      /v1/auth/exchange), by reason: malformed,
                                      alg_refused, header_refused, id_token, wrong_issuer,
                                      wrong_audience, unknown_kid, bad_signature,
                                      no_expiry, expired, not_yet_valid, no_subject,
                                      unmapped, unknown_team, revoked, keys_unavailable,
                                      known_refusal (a refused token presented again),
                                      not_a_token (exchange without one)
fairgate_jwt_key_fetches_total        key-set fetches from the issuers
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["JwtMetrics"]


class JwtMetrics:
    """Registers the families on ``registry``; token authentication counts here."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._refused = Counter(
            "fairgate_jwt_refusals",
            "Access tokens refused, by reason (the client always gets the bad-key 401)",
            ["reason"],
            registry=registry,
        )
        self._fetches = Counter(
            "fairgate_jwt_key_fetches",
            "Key-set (JWKS) fetches from the access-token issuers",
            registry=registry,
        )

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def fetched(self) -> None:
        self._fetches.inc()
