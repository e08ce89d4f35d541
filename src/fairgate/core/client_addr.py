"""The client's address: the connection's, or what trusted proxies say it was.

A connection from an address outside ``trusted_proxies`` is its own client, and
whatever ``X-Forwarded-For`` it sends is ignored. A connection from a trusted
proxy is walked back: the header's entries (several header lines count as one
list, joined in order) are read from the right; each trusted entry is one more
proxy hop and the walk goes on; the first entry that is not trusted is the
client. Only the right end of the list was written by proxies the operator
runs: everything left of the first untrusted entry came from the client, so it
is never read.

The walk stops at the last trusted hop — that hop is the client — when it meets
an entry that is not a plain address (empty, a port as in ``192.0.2.1:80`` or
``[::1]:80``, a zone as in ``fe80::1%eth0``, any other text: ``fairgate.core.cidr``),
when the list runs out (every entry trusted: the leftmost one), or after
``MAX_HOPS`` trusted entries. A stop never reaches further left than the walk
did, so a garbled or overlong header can make the client look like one of the
operator's own proxies, never like an address the client chose.

Worked example, trusted 10.0.0.0/8, the connection from 10.0.0.5:

    X-Forwarded-For: 6.6.6.6, 192.0.2.7, 10.0.0.9      →  192.0.2.7
    X-Forwarded-For: 192.0.2.7:4711, 10.0.0.9          →  10.0.0.9   (a port: stop)
    X-Forwarded-For: 10.0.0.8, 10.0.0.9                →  10.0.0.8   (all trusted)
    (no header)                                        →  10.0.0.5

Addresses returned from the header are normalised (``2001:DB8::1`` →
``2001:db8::1``, ``::ffff:192.0.2.7`` → ``192.0.2.7``); the connection's
address is returned as the listener reported it. With no trusted proxy
configured the header is never looked at.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fairgate.core.cidr import NetworkSet, address_value, parse_address

__all__ = ["MAX_HOPS", "ClientAddresses"]

MAX_HOPS = 64
"""Entries of ``X-Forwarded-For`` read at most (from the right) before the walk stops."""

_HEADER = b"x-forwarded-for"


class ClientAddresses:
    """Resolves a request's client address from its connection and ``X-Forwarded-For``.

    ``trusted`` are the networks of the operator's reverse proxies (empty: every
    client is its connection). Stateless after construction; never raises.
    """

    __slots__ = ("_trusted",)

    def __init__(self, trusted: NetworkSet) -> None:
        self._trusted = trusted

    @property
    def trusted(self) -> NetworkSet:
        return self._trusted

    def of(self, peer: str, headers: Iterable[tuple[bytes, bytes]]) -> str:
        """The client of a request from ``peer`` with ASGI ``headers`` (names in lower case).

        The headers are scanned only when ``peer`` is a trusted proxy.
        """
        if not self._trusted or not self._trusted.holds(peer):
            return peer
        return self._walk(peer, [value for name, value in headers if name == _HEADER])

    def resolve(self, peer: str, forwarded: Sequence[bytes | str]) -> str:
        """The client of a request from ``peer`` carrying the ``X-Forwarded-For`` values
        ``forwarded`` (one per header line, in the order received)."""
        if not self._trusted or not self._trusted.holds(peer):
            return peer
        return self._walk(peer, forwarded)

    def _walk(self, peer: str, forwarded: Sequence[bytes | str]) -> str:
        if not forwarded:
            return peer
        joined = ",".join(v.decode("latin-1") if isinstance(v, bytes) else v for v in forwarded)
        # Split from the right and no further than the walk may go: a header of
        # thousands of entries costs no more than one of MAX_HOPS + 1.
        entries = joined.rsplit(",", MAX_HOPS)
        client: str | None = None
        for hop, entry in enumerate(reversed(entries)):
            if hop == MAX_HOPS:
                break
            text = entry.strip(" \t")
            value = address_value(text)
            if value is None:
                break
            client = text
            if not self._trusted.holds_value(value):
                break
        # normalised once, for the entry chosen only
        return peer if client is None else str(parse_address(client))
