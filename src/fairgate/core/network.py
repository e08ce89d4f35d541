"""The client network: what one subscriber holds, for limits counted per network.

An IPv4 address is its own network; an IPv6 address counts as its /64 (the
prefix one subscriber is usually given, so its 2**64 addresses are one client);
an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``) counts as its IPv4 address. A
peer that is not an IP address (a Unix socket) is its own network, by its text.

Networks are integers so that a lookup costs one hash: an IPv4 network is its
address (< 2**32), an IPv6 network its /64 prefix tagged with ``V6_TAG``
(``V6_TAG | address >> 64``), so the two never collide.

    network_of("192.0.2.7") == 0xC0000207
    network_of("2001:db8::1") == network_of("2001:db8::ffff:1")   # the same /64
"""

from __future__ import annotations

import ipaddress

__all__ = ["V6_TAG", "Network", "network_of"]

V6_TAG = 1 << 64

Network = int | str


def network_of(addr: str) -> Network:
    """The network ``addr`` belongs to (see the module's docstring)."""
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return addr
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        if mapped is None:
            return V6_TAG | (int(ip) >> 64)
        return int(mapped)
    return int(ip)
