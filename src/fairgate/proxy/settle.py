"""The last stage: metrics and the log line for every request, whatever its outcome.

Runs in the pipeline's ``finally``; it must never raise and never block.
Accounting records join here when the accounting package lands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fairgate.observability.metrics import GatewayMetrics
from fairgate.proxy.exchange import Exchange, Outcome

__all__ = ["Settler"]

log = logging.getLogger("fairgate.request")


class Settler:
    def __init__(
        self, metrics: GatewayMetrics, record: Callable[[Exchange], None] | None = None
    ) -> None:
        self._m = metrics
        self._record = record
        # Read once: the level does not change while serving, and the check costs µs.
        self._debug = log.isEnabledFor(logging.DEBUG)

    def settle(self, ex: Exchange) -> None:
        if self._record is not None:
            try:
                self._record(ex)
            except Exception:  # never let accounting break the answer; counted as a drop
                log.exception("could not build the usage record of %s", ex.request_id)
                self._m.child(self._m.accounting, "dropped").inc()
        m = self._m
        model = ex.model or "-"
        route = ex.endpoint or "-"
        finished = ex.finished or ex.started
        total = finished - ex.started
        status = (
            str(ex.status) if ex.status else ("499" if ex.outcome == Outcome.CLIENT_ABORT else "0")
        )
        m.child(m.requests, model, route, status).inc()
        m.child(m.duration, model, route).observe(total)
        if ex.first_byte_at is not None and ex.replica:
            m.child(m.ttft, model).observe(ex.first_byte_at - ex.started)
        if ex.replica:
            m.overhead.observe(max(0.0, total - ex.upstream_time))
        usage = ex.usage
        if usage is not None:
            if usage.prompt_tokens:
                m.child(m.tokens, model, "prompt").inc(usage.prompt_tokens)
            if usage.completion_tokens:
                m.child(m.tokens, model, "completion").inc(usage.completion_tokens)
            if usage.cached_tokens:
                m.child(m.tokens, model, "cached").inc(usage.cached_tokens)
            if usage.estimated:
                m.child(m.usage_estimated, model).inc()
        if ex.outcome == Outcome.REFUSED:
            m.child(m.denials, ex.reason or "refused").inc()
        elif (
            ex.outcome
            in (Outcome.CLIENT_ABORT, Outcome.SLOW_READER, Outcome.TRUNCATED, Outcome.TIMEOUT)
            and ex.stream
        ):
            m.child(m.stream_aborts, ex.reason or ex.outcome).inc()
        if ex.outcome != Outcome.OK:
            # Refused credentials are counted (fairgate_denials) and logged by auth with
            # their reason; one info line each here would let a key spray flood the log.
            quiet = ex.outcome == Outcome.REFUSED and ex.status in (401, 429)
            log.log(
                logging.DEBUG if quiet else logging.INFO,
                "request %s %s %s ended %s (%s) status=%s replica=%s attempts=%d client=%s",
                ex.request_id,
                ex.method,
                ex.path,
                ex.outcome,
                ex.reason,
                status,
                ex.replica or "-",
                ex.attempts,
                ex.client or "-",
            )
        elif self._debug:
            log.debug(
                "request %s %s model=%s replica=%s status=%s attempts=%d total=%.4fs client=%s",
                ex.request_id,
                ex.path,
                model,
                ex.replica,
                status,
                ex.attempts,
                total,
                ex.client or "-",
            )

    def retried(self, model: str) -> None:
        self._m.child(self._m.retries, model).inc()

    def fell_back(self, model: str, fallback: str) -> None:
        self._m.child(self._m.fallbacks, model, fallback).inc()

    def attempt_failed(self, replica: str, reason: str) -> None:
        self._m.child(self._m.upstream_errors, replica, reason).inc()
