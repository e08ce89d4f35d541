"""Active health checks: is each replica's engine up and answering?

Every ``interval`` seconds each replica gets ``GET <adapter.health_path>``
(vLLM and llama-server ``/health``, generic OpenAI servers ``/v1/models``,
with the internal key). A 2xx answer within ``timeout`` passes; any other
status, a timeout or a connection error fails. ``unhealthy_after`` failed
checks in a row mark the replica unhealthy, and routing skips it until
``healthy_after`` checks in a row pass. Each flip is logged once, when it
happens, with the last failure's reason. Health never feeds the circuit
breaker: that one judges real requests only.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import aiohttp

from fairgate.upstream.periodic import PeriodicTask
from fairgate.upstream.registry import ReplicaRegistry
from fairgate.upstream.replica import Replica
from fairgate.upstream.sessions import UpstreamSessions, read_bounded

__all__ = ["HealthChecker"]

_log = logging.getLogger(__name__)
_MAX_BODY = 256 * 1024  # read and dropped, so the connection can be kept alive


class HealthChecker:
    """Checks every replica of ``registry`` every ``interval`` seconds (``timeout`` each);
    ``unhealthy_after``/``healthy_after`` checks in a row flip a replica's health.

    ``start()``/``stop()`` run it as a background task; ``check_once()`` runs
    one round now (at start-up, or in tests).
    """

    def __init__(
        self,
        registry: ReplicaRegistry,
        sessions: UpstreamSessions,
        interval: float,
        timeout: float,
        *,
        unhealthy_after: int = 1,
        healthy_after: int = 1,
    ) -> None:
        if timeout <= 0:
            raise ValueError("health check timeout must be positive")
        if unhealthy_after < 1 or healthy_after < 1:
            raise ValueError("health check thresholds must be at least 1")
        self._registry = registry
        self._sessions = sessions
        self._timeout = timeout
        self._unhealthy_after = unhealthy_after
        self._healthy_after = healthy_after
        self._loop = PeriodicTask("fairgate-health", interval, self.check_once)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def check_once(self) -> None:
        await asyncio.gather(*(self._check(replica) for replica in self._registry.all()))

    async def _check(self, replica: Replica) -> None:
        reason = await self._probe(replica)
        passed = reason is None
        if replica.set_health(
            passed, unhealthy_after=self._unhealthy_after, healthy_after=self._healthy_after
        ):
            if reason is None:
                _log.info("replica %s/%s is healthy again", replica.model, replica.name)
            else:
                _log.warning("replica %s/%s is unhealthy: %s", replica.model, replica.name, reason)

    async def _probe(self, replica: Replica) -> str | None:
        """``None`` when healthy, else the reason for the log."""
        adapter = replica.adapter
        headers = adapter.headers(
            internal_key=replica.internal_key,
            content_type=None,
            accept=None,
            request_id=f"health-{uuid.uuid4().hex}",
            priority=None,
            host=replica.host_header,
        )
        try:
            async with asyncio.timeout(self._timeout):
                async with self._sessions.request(
                    replica,
                    "GET",
                    adapter.health_path,
                    headers=headers,
                    client_timeout=aiohttp.ClientTimeout(total=self._timeout),
                ) as response:
                    await read_bounded(response, _MAX_BODY)
                    if 200 <= response.status < 300:
                        return None
                    return f"{adapter.health_path} answered {response.status}"
        except TimeoutError:
            return f"no answer within {self._timeout:g}s"
        except (aiohttp.ClientError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            # the client's error can quote the engine's bytes (a broken status line),
            # and so the internal key an engine echoes there
            key = replica.internal_key
            return reason.replace(key, "[redacted]") if key else reason
