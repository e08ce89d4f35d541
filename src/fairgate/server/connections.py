"""Connection caps: how many connections one listener holds, in total and per client network.

Each open connection may be reading a request body of up to ``limits.max_body_bytes``,
so the connections a listener holds bound the memory its requests can take
(``docs/operations.md`` gives the figure). A listener holds at most ``total``
connections, and at most ``per_network`` from one client network (an IPv4 address or
an IPv6 /64, ``fairgate.core.network``; None: no per-network cap, for a listener
behind a reverse proxy, where every client is the proxy). Connections from
``exempt`` networks (the trusted proxies: each carries many clients) count toward
the total only. The counts are this process's: with ``--workers N`` each worker
has its own.

A connection over a cap is not served: the protocol answers it at once with a 503
envelope and closes it (``fairgate.server.protocol``). The refusals are logged at
most once per ``LOG_EVERY`` seconds per listener, with how many there were.

    caps = ConnectionCaps("client", total=1024, per_network=256, on_refused=count)
    network = caps.open("192.0.2.7")     # a Refusal, or the network to give back
    caps.close(network)                  # when that connection is lost
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from fairgate.core.cidr import NetworkSet
from fairgate.core.errors import error_body
from fairgate.core.network import Network, network_of

__all__ = ["LOG_EVERY", "ConnectionCaps", "Refusal"]

log = logging.getLogger("fairgate.server")

LOG_EVERY = 10.0

_EXEMPT: Network = -1  # no network is negative (``fairgate.core.network``)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A connection over a cap: the whole answer to write, and why (for the log)."""

    answer: bytes
    reason: str


def _answer(message: str, code: str) -> bytes:
    body = error_body(message, "service_unavailable", code)
    return (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\nconnection: close\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


_FULL = Refusal(
    _answer("the gateway holds as many connections as it may; try again", "too_many_connections"),
    "max_connections",
)
_NETWORK_FULL = Refusal(
    _answer(
        "too many connections from your network; reuse or close some",
        "too_many_connections_from_network",
    ),
    "max_connections_per_network",
)


class ConnectionCaps:
    """The open connections of one listener, counted in total and per network."""

    def __init__(
        self,
        listener: str,
        *,
        total: int,
        per_network: int | None,
        on_refused: Callable[[str], None] | None = None,
        exempt: NetworkSet | None = None,
    ) -> None:
        if total < 1 or (per_network is not None and per_network < 1):
            raise ValueError("connection caps are at least 1")
        self.listener = listener
        self._on_refused = on_refused  # (reason), for a metric
        self._total = total
        self._per_network = per_network
        self._exempt = exempt if exempt else None
        self._open = 0
        self._by_network: dict[Network, int] = {}
        self._refused = 0
        self._logged_at = -LOG_EVERY

    @property
    def open_connections(self) -> int:
        return self._open

    def open(self, peer: str) -> Network | Refusal:
        """Count a new connection from ``peer`` (its address), or the refusal to answer."""
        if self._open >= self._total:
            return self._refuse(_FULL, peer)
        if self._exempt is not None and self._exempt.holds(peer):
            self._open += 1
            return _EXEMPT
        network = network_of(peer)
        count = self._by_network.get(network, 0)
        if self._per_network is not None and count >= self._per_network:
            return self._refuse(_NETWORK_FULL, peer)
        self._by_network[network] = count + 1
        self._open += 1
        return network

    def close(self, network: Network) -> None:
        """Uncount a connection ``open`` counted."""
        self._open -= 1
        if network == _EXEMPT:
            return
        count = self._by_network.get(network, 0) - 1
        if count > 0:
            self._by_network[network] = count
        else:
            self._by_network.pop(network, None)

    def _refuse(self, refusal: Refusal, peer: str) -> Refusal:
        self._refused += 1
        if self._on_refused is not None:
            self._on_refused(refusal.reason)
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY:
            log.warning(
                "%s listener: refused %d connection(s) over %s (the last from %s)",
                self.listener,
                self._refused,
                refusal.reason,
                peer,
            )
            self._refused, self._logged_at = 0, now
        return refusal
