"""Vault secret refreshes as Prometheus metrics.

    fairgate_vault_available                          1 while the last refresh round read every
                                                      vault secret, 0 during an outage (the last
                                                      values read stay in use)
    fairgate_secret_refresh_failures_total{reference} failed reads of one reference after start-up

``reference`` is the reference as configured (``vault:secret/engines#key``): the
series are bounded by the configuration, and no label holds a secret.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = ["SecretMetrics"]


class SecretMetrics:
    """Registers the families on ``registry``; implements ``fairgate.vault.SecretObserver``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._available = Gauge(
            "fairgate_vault_available",
            "1 while the last refresh read every vault secret, 0 while some could not be read",
            registry=registry,
        )
        self._failures = Counter(
            "fairgate_secret_refresh_failures",
            "Failed reads of a vault secret after start-up, by reference",
            ["reference"],
            registry=registry,
        )

    def refresh_failed(self, reference: str) -> None:
        self._failures.labels(reference).inc()

    def available(self, up: bool) -> None:
        self._available.set(1.0 if up else 0.0)
