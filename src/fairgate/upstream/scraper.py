"""Engine load scraped from each replica's ``/metrics``.

Every ``interval`` seconds each replica whose adapter names load metrics
gets ``GET /metrics``; the reading (running, waiting, KV occupancy, the
preemption counter; names from ``adapter.metric_names``) is stored on the
replica with its time and trusted for ``stale_after`` seconds (choose two or three intervals). A
failed scrape (connection error, timeout, non-2xx, a page over ``max_bytes``,
text that does not parse) drops the stored load at once, so routing sees
"unknown" rather than an old number. A scrape failure never touches the
circuit breaker: the engine may be serving fine while only its metrics page
is down. Failures are logged once when they start and once when they end.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import aiohttp

from fairgate.engines import EngineLoad, parse_engine_metrics
from fairgate.upstream.periodic import PeriodicTask
from fairgate.upstream.registry import ReplicaRegistry
from fairgate.upstream.replica import Replica
from fairgate.upstream.sessions import UpstreamSessions, read_bounded

__all__ = ["MetricsScraper"]

_log = logging.getLogger(__name__)


class _ScrapeFailed(Exception):
    pass


class MetricsScraper:
    """Scrapes every replica with load metrics every ``interval`` seconds (``timeout`` each)."""

    def __init__(
        self,
        registry: ReplicaRegistry,
        sessions: UpstreamSessions,
        interval: float,
        timeout: float,
        stale_after: float,
        *,
        max_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        if timeout <= 0 or stale_after <= 0:
            raise ValueError("scrape timeout and stale_after must be positive")
        self._registry = registry
        self._sessions = sessions
        self._timeout = timeout
        self._stale_after = stale_after
        self._max_bytes = max_bytes
        self._failing: set[tuple[str, str]] = set()
        self._loop = PeriodicTask("fairgate-scrape", interval, self.scrape_once)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def scrape_once(self) -> None:
        replicas = [r for r in self._registry.all() if r.adapter.metric_names.any()]
        await asyncio.gather(*(self._scrape(replica) for replica in replicas))

    async def _scrape(self, replica: Replica) -> None:
        key = (replica.model, replica.name)
        try:
            load = await self._read(replica)
        except _ScrapeFailed as exc:
            replica.mark_load_stale()
            if key not in self._failing:
                self._failing.add(key)
                # the reason can quote the engine's bytes, and so a key it echoes there
                reason = str(exc)
                if replica.internal_key:
                    reason = reason.replace(replica.internal_key, "[redacted]")
                _log.warning(
                    "metrics of %s/%s unavailable: %s", replica.model, replica.name, reason
                )
            return
        replica.record_load(load, fresh_for=self._stale_after)
        if key in self._failing:
            self._failing.discard(key)
            _log.info("metrics of %s/%s available again", replica.model, replica.name)

    async def _read(self, replica: Replica) -> EngineLoad:
        headers = replica.adapter.headers(
            internal_key=replica.internal_key,
            content_type=None,
            accept=b"text/plain",
            request_id=f"scrape-{uuid.uuid4().hex}",
            priority=None,
            host=replica.host_header,
        )
        try:
            async with asyncio.timeout(self._timeout):
                async with self._sessions.request(
                    replica,
                    "GET",
                    "/metrics",
                    headers=headers,
                    client_timeout=aiohttp.ClientTimeout(total=self._timeout),
                ) as response:
                    if not 200 <= response.status < 300:
                        raise _ScrapeFailed(f"/metrics answered {response.status}")
                    body = await read_bounded(response, self._max_bytes)
        except TimeoutError:
            raise _ScrapeFailed(f"no answer within {self._timeout:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise _ScrapeFailed(f"{type(exc).__name__}: {exc}") from None
        if body is None:
            raise _ScrapeFailed(f"/metrics is larger than {self._max_bytes} bytes")
        try:
            return parse_engine_metrics(
                body.decode("utf-8", "replace"), replica.adapter.metric_names
            )
        except ValueError as exc:
            raise _ScrapeFailed(f"unparsable /metrics: {exc}") from None
