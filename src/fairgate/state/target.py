"""Where the gateways' Redis is: one server by URL, or the primary Redis Sentinel names.

    RedisTarget(url="redis://10.0.0.7:6379/0")                          one server
    RedisTarget(url=None, sentinels=(("10.0.0.5", 26379), ...), service_name="fairgate")

``pool`` and ``client`` build redis-py objects for either. With Sentinels they
are redis-py's own Sentinel-managed connections: each new connection asks the
Sentinels, in turn, for the primary of ``service_name`` (the first that names a
primary it holds healthy wins), and a connection that meets ``READONLY`` (its
server was demoted to a replica) is dropped as a connection error. After a
failover the next call therefore reaches the new primary, without a restart;
the calls in flight when the old primary died fail like any other Redis error.

The URL (a secret: never logged) keeps its password, user name, database
number, ``rediss://`` scheme and query options with Sentinels; its host and
port are ignored then, the Sentinels say where the primary is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

__all__ = ["RedisTarget", "close_client"]


class _BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """redis-py's Sentinel pool with the blocking pool's wait for a free connection
    (past ``max_connections`` a call waits, within its timeout, instead of failing)."""


@dataclass(frozen=True)
class RedisTarget:
    """One Redis (``url``), or the primary that ``sentinels`` name for ``service_name``.

    ``sentinel_password`` is the Sentinels' own ``requirepass`` (None: none).
    """

    url: str | None = field(repr=False)
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.sentinels and not self.service_name:
            raise ValueError("Sentinels need the service name they monitor")
        if not self.sentinels and self.url is None:
            raise ValueError("a Redis URL or Sentinels are needed")

    def pool(self, *, max_connections: int, timeout: float) -> ConnectionPool:
        """A blocking pool of at most ``max_connections``, every connect and wait for a
        free connection bounded by ``timeout``; redis-py never retries.

        Reads and writes carry no timeout of redis-py's: every caller bounds its whole
        call (``RedisCounterStore._guarded``), and a socket timeout under it only added a
        timer for the read and a task for the write (``asyncio.wait_for``) to every call.
        A connection whose call was cut short is disconnected by redis-py."""
        options: dict[str, Any] = {
            "max_connections": max_connections,
            "timeout": timeout,
            "socket_timeout": None,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 0,
        }
        if not self.sentinels:
            assert self.url is not None
            return BlockingConnectionPool.from_url(self.url, **options)
        manager = self._sentinel(timeout)
        primary = self._primary()
        return _BlockingSentinelPool(  # type: ignore[no-untyped-call]  # redis-py's
            self.service_name, manager, **primary, **options
        )

    def client(
        self, *, socket_timeout: float | None, connect_timeout: float, health_check_interval: int
    ) -> Redis:
        """A client of its own pool (pub/sub: a long-lived connection per subscriber)."""
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "health_check_interval": health_check_interval,
        }
        if not self.sentinels:
            assert self.url is not None
            return Redis.from_url(self.url, **options)
        manager = self._sentinel(connect_timeout)
        primary = self._primary()
        pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]  # redis-py's
            self.service_name, manager, **primary, **options
        )
        return Redis.from_pool(pool)

    def _sentinel(self, timeout: float) -> Sentinel:
        asked: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
        }
        if self.sentinel_password is not None:
            asked["password"] = self.sentinel_password
        return Sentinel(list(self.sentinels), sentinel_kwargs=asked)  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis 8.2

    def _primary(self) -> dict[str, Any]:
        """The URL's connection options for the primary, without its address."""
        if self.url is None:
            return {}
        options = dict(parse_url(self.url))
        options.pop("host", None)
        options.pop("port", None)
        options.pop("path", None)
        if options.pop("connection_class", None) is SSLConnection:
            options["ssl"] = True  # the Sentinel pool picks its TLS connection class
        return options


async def close_client(client: Redis) -> None:
    """Close ``client`` and its pool, and the connections to Sentinels behind it."""
    pool = client.connection_pool
    await client.aclose()
    if isinstance(pool, SentinelConnectionPool):
        await pool.sentinel_manager.aclose()
