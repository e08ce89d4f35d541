"""Access-change wake-ups over Redis pub/sub, for gateways that share a Redis.

    notices = RedisNotices(url, prefix="fairgate:", timeout=0.5)
    await notices.publish()          # after a change that withdraws access committed
    await notices.run(wake)          # in each gateway: wake() at each message (never returns)

A message carries nothing but the fact that the access-change feed has a new
row: the reader reads the feed from the store, which alone says what changed,
so a message from anyone who can write to the channel costs a feed read at
most. Pub/sub delivers only to connected subscribers and a publish may fail:
these wake-ups shorten the wait, the feed's own poll and LISTEN keep it bounded.
The channel is ``<prefix>access-changes``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from fairgate.state.target import RedisTarget, close_client

__all__ = ["RedisNotices"]

log = logging.getLogger(__name__)


class RedisNotices:
    """Publishes and subscribes to the access-change channel under ``prefix``.

    ``url`` is a secret (never logged), or a ``RedisTarget`` (Sentinels);
    ``timeout`` (s, > 0) bounds connecting and each publish; ``retry`` (s) is the
    pause before subscribing again after a lost connection. ``publish`` never
    raises for a Redis failure (it logs).
    """

    def __init__(
        self, url: str | RedisTarget, *, prefix: str, timeout: float, retry: float = 1.0
    ) -> None:
        self.channel = f"{prefix}access-changes"
        self._target = RedisTarget(url) if isinstance(url, str) else url
        self._timeout = timeout
        self._retry = retry
        self._publisher: Redis | None = None

    async def publish(self) -> None:
        """Tell every subscribed gateway to read the feed now."""
        if self._publisher is None:
            self._publisher = self._client(socket_timeout=self._timeout)
        try:
            await asyncio.wait_for(self._publisher.publish(self.channel, b"1"), self._timeout)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("access changes: Redis publish failed (the feed still has it): %s", exc)

    async def run(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` at each message and after each (re)subscription; never returns."""
        while True:
            client = self._client(socket_timeout=None)
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await asyncio.wait_for(pubsub.subscribe(self.channel), self._timeout)
                    wake()  # whatever was published while nobody listened
                    while True:
                        message = await pubsub.get_message(timeout=5.0)
                        if message is not None:
                            wake()
            except (RedisError, OSError, TimeoutError) as exc:
                log.warning("access changes: Redis subscription lost, subscribing again: %s", exc)
            finally:
                await close_client(client)
            await asyncio.sleep(self._retry)

    async def aclose(self) -> None:
        if self._publisher is not None:
            publisher, self._publisher = self._publisher, None
            await close_client(publisher)

    def _client(self, *, socket_timeout: float | None) -> Redis:
        return self._target.client(
            socket_timeout=socket_timeout,
            connect_timeout=self._timeout,
            health_check_interval=30,
        )
