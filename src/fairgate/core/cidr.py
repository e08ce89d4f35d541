"""Addresses and networks written by people or sent by clients, and sets of networks to test.

``parse_address`` reads one address the way the gateway trusts it: a plain IPv4
or IPv6 address, nothing else. A zone (``fe80::1%eth0``), a port
(``192.0.2.1:80``, ``[::1]:80``), brackets, quotes, a prefix or surrounding
text make it no address (None): every one of them is a sign that something
other than a proxy's own bookkeeping wrote it. An IPv4-mapped IPv6 address
(``::ffff:192.0.2.1``) is its IPv4 address, so a dual-stack socket and an
IPv4 one see the same client.

``parse_network`` reads a CIDR from the configuration: ``10.0.0.0/8``,
``2001:db8::/32``, or a bare address (its /32 or /128). Host bits beyond the
prefix (``10.0.0.5/8``) are refused rather than masked, because the operator
who wrote them meant either the host or the network and only they know which;
IPv4-mapped networks are refused too (write the IPv4 network).

A :class:`NetworkSet` holds the networks as integers grouped by prefix length,
so a membership test costs one set lookup per distinct prefix length in the
set (usually one or two), whatever the number of networks:

    trusted = NetworkSet(parse_network(c) for c in ["10.0.0.0/8", "192.0.2.7"])
    trusted.holds("10.1.2.3")          # True
    trusted.holds("::ffff:10.1.2.3")   # True: IPv4-mapped
    trusted.holds("fe80::1%eth0")      # False: a zoned address is no address
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

__all__ = [
    "IPAddress",
    "IPNetwork",
    "NetworkSet",
    "address_value",
    "parse_address",
    "parse_network",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ZONE = "%"
_MAPPED = b"\x00" * 10 + b"\xff\xff"  # the first 12 bytes of ::ffff:a.b.c.d


def address_value(text: str) -> tuple[int, int] | None:
    """``text`` as (version, integer) (IPv4-mapped IPv6 as IPv4), or None when it is not a
    plain address.

    ``inet_pton`` rather than ``ipaddress``: about seven times faster (0.7 µs against
    4.8 µs on a loaded machine, timeit), and as strict: it refuses zones, ports,
    brackets, spaces, leading zeros and other digits than ASCII ones.
    """
    try:
        return 4, int.from_bytes(socket.inet_pton(socket.AF_INET, text))
    except (OSError, ValueError, UnicodeError):
        pass
    try:
        packed = socket.inet_pton(socket.AF_INET6, text)
    except (OSError, ValueError, UnicodeError):
        return None
    if packed[:12] == _MAPPED:
        return 4, int.from_bytes(packed[12:])
    return 6, int.from_bytes(packed)


def parse_address(text: str) -> IPAddress | None:
    """``text`` as an address (IPv4-mapped IPv6 as IPv4), or None when it is not a plain one."""
    value = address_value(text)
    if value is None:
        return None
    version, number = value
    return ipaddress.IPv4Address(number) if version == 4 else ipaddress.IPv6Address(number)


def parse_network(text: str) -> IPNetwork:
    """``text`` as a network, or ``ValueError`` saying why not (see the module's docstring)."""
    if not isinstance(text, str) or text != text.strip() or not text:
        raise ValueError(f"expected a network such as 10.0.0.0/8 or 2001:db8::/32, got {text!r}")
    if _ZONE in text:
        raise ValueError(f"a network has no zone: {text!r}")
    try:
        network = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(
            f"expected a network such as 10.0.0.0/8 or 2001:db8::/32, got {text!r}"
        ) from None
    address = text.split("/", 1)[0]
    if ipaddress.ip_address(address) != network.network_address:
        raise ValueError(
            f"{text!r} has host bits set: write {network} for the network"
            f" or {address}/{network.max_prefixlen} for the host"
        )
    if isinstance(network, ipaddress.IPv6Network) and network.network_address.ipv4_mapped:
        raise ValueError(f"write the IPv4 network instead of the IPv4-mapped {text!r}")
    return network


class NetworkSet:
    """A fixed set of networks; ``holds`` says whether an address is in any of them.

    Built once (at load time); an empty set holds nothing and is falsy.
    """

    __slots__ = ("_v4", "_v6")

    def __init__(self, networks: Iterable[IPNetwork]) -> None:
        v4: dict[int, set[int]] = {}
        v6: dict[int, set[int]] = {}
        for network in networks:
            table = v4 if network.version == 4 else v6
            shift = network.max_prefixlen - network.prefixlen
            table.setdefault(shift, set()).add(int(network.network_address) >> shift)
        self._v4 = _frozen(v4)
        self._v6 = _frozen(v6)

    def __bool__(self) -> bool:
        return bool(self._v4 or self._v6)

    def holds(self, address: str) -> bool:
        """Whether ``address`` (text) is a plain address inside one of the networks."""
        value = address_value(address)
        return value is not None and self.holds_value(value)

    def holds_value(self, value: tuple[int, int]) -> bool:
        """Whether ``value`` (from :func:`address_value`) is in one of the networks."""
        version, number = value
        for shift, prefixes in self._v4 if version == 4 else self._v6:
            if number >> shift in prefixes:
                return True
        return False


def _frozen(table: dict[int, set[int]]) -> tuple[tuple[int, frozenset[int]], ...]:
    # Widest networks first: a /0 or /8 answers before the host entries are tried.
    return tuple((shift, frozenset(table[shift])) for shift in sorted(table, reverse=True))
