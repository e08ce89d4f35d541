"""IP allowlists of a key: parsed once when the key is loaded, matched per request.

A list is networks written the way the configuration writes them
(``fairgate.core.cidr.parse_network``): ``10.0.0.0/8``, ``2001:db8::/32``, a
bare address for its /32 or /128; bits beyond the prefix (``10.0.0.5/8``) and
IPv4-mapped networks are refused, because only the one who wrote them knows
what they meant. ``parse_cidrs`` checks a whole list, names the entry it
refuses by its position, and writes each network back in its normal form, once.

``AddressRule`` holds every list that applies to one key (its organisation's,
its team's, its own) as ``NetworkSet`` objects; an address must be in all of
them. The client address is parsed once (an IPv4-mapped IPv6 client is its IPv4
address, a zoned or non-IP peer is no address and in no list), then each list
costs one set lookup per prefix length it holds:

    rule = AddressRule.of([("org acme", ["10.0.0.0/8"]), ("team lab", None),
                           ("key 01J…", ["10.1.0.0/16"])])
    rule.refusal("10.1.2.3")          → None (every list holds it)
    rule.refusal("::ffff:10.9.0.1")   → "key 01J…"
    rule.refusal("192.0.2.1")         → "org acme"
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fairgate.core.cidr import NetworkSet, address_value, parse_network

__all__ = ["MAX_CIDRS", "AddressRule", "parse_cidrs"]

log = logging.getLogger("fairgate.auth")

MAX_CIDRS = 256
"""Most networks in one list: enough for any site, small enough to read at a glance."""


def parse_cidrs(entries: Sequence[str]) -> tuple[str, ...]:
    """The networks of ``entries`` in their normal form, each once, in the order given.

    Raises ValueError naming the first entry refused (``cidrs[1]: '10.0.0.5/8' has
    host bits set: …``), or a list longer than ``MAX_CIDRS``.
    """
    if len(entries) > MAX_CIDRS:
        raise ValueError(f"at most {MAX_CIDRS} networks in one list, not {len(entries)}")
    seen: dict[str, None] = {}
    for position, entry in enumerate(entries):
        try:
            seen[str(parse_network(entry))] = None
        except ValueError as error:
            raise ValueError(f"cidrs[{position}]: {error}") from None
    return tuple(seen)


def _stored(cidrs: Iterable[str]) -> NetworkSet:
    """The set of a stored list. An entry that does not parse is left out with a warning:
    a list holding only such entries allows nothing, never everything."""
    networks = []
    for entry in cidrs:
        try:
            networks.append(parse_network(entry))
        except ValueError as error:
            log.warning("IP allowlist entry ignored: %s", error)
    return NetworkSet(networks)


@dataclass(frozen=True, slots=True, eq=False)
class AddressRule:
    """The lists one key's requests must all pass, each named for the server's log
    (``org acme``, ``team lab``, ``key 01J…``)."""

    lists: tuple[tuple[str, NetworkSet], ...]

    @classmethod
    def of(cls, named: Iterable[tuple[str, Sequence[str] | None]]) -> AddressRule | None:
        """The rule of the lists given (``None`` for a scope without a list); None when no
        list applies, so a key without lists costs nothing per request."""
        lists = tuple((name, _stored(cidrs)) for name, cidrs in named if cidrs is not None)
        return cls(lists) if lists else None

    def refusal(self, addr: str) -> str | None:
        """The name of the first list ``addr`` is outside of, or None when every list holds it.

        A peer that is not a plain IP address (a Unix socket, a zoned address) is
        outside every list.
        """
        value = address_value(addr)
        for name, networks in self.lists:
            if value is None or not networks.holds_value(value):
                return name
        return None
