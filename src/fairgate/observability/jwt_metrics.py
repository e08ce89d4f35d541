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
fairgate_jwt_exchanges_total{outcome} /v1/auth/exchange calls with a valid token: issued,
                                      rate_limited (past exchanges_per_minute)
fairgate_jwt_exchange_revocations_total  exchanged keys revoked because their person
                                      held max_keys (a loop, or max_keys set too low)
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
        self._exchanges = Counter(
            "fairgate_jwt_exchanges",
            "Token exchanges with a valid workload token, by outcome (issued, rate_limited)",
            ["outcome"],
            registry=registry,
        )
        self._revocations = Counter(
            "fairgate_jwt_exchange_revocations",
            "Exchanged keys revoked because their person held max_keys unexpired ones",
            registry=registry,
        )

    def exchanged(self, outcome: str, revoked: int) -> None:
        self._exchanges.labels(outcome).inc()
        if revoked:
            self._revocations.inc(revoked)

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()

    def fetched(self) -> None:
        self._fetches.inc()
