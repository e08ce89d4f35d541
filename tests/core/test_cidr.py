"""Addresses as the gateway trusts them, networks from the configuration, and sets of networks."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgate.core.cidr import NetworkSet, parse_address, parse_network


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:DB8::1", "2001:db8::1"),
        ("::ffff:192.0.2.7", "192.0.2.7"),  # IPv4-mapped: the IPv4 address
        ("::1", "::1"),
    ],
)
def test_plain_addresses_are_read_and_normalised(text: str, expected: str) -> None:
    assert str(parse_address(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "fe80::1%eth0",  # a zone
        "fe80::1%25eth0",
        "192.0.2.7:8080",  # a port
        "[2001:db8::1]:443",
        "[2001:db8::1]",
        '"192.0.2.7"',
        "192.0.2.7/32",
        "192.0.2.07",  # a leading zero: octal to some parsers
        "unknown",
        "_hidden",  # RFC 7239 obfuscated identifier
        "192.0.2.7 ",
        "1.2.3.4.5",
        "٣.٣.٣.٣",  # digits of another script
    ],
)
def test_anything_but_a_plain_address_is_no_address(text: str) -> None:
    assert parse_address(text) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("192.0.2.7", "192.0.2.7/32"),
        ("2001:DB8::/32", "2001:db8::/32"),
        ("::1", "::1/128"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("10.0.0.0/255.0.0.0", "10.0.0.0/8"),
    ],
)
def test_networks_are_read_and_normalised(text: str, expected: str) -> None:
    assert str(parse_network(text)) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10.0.0.5/8", "host bits set: write 10.0.0.0/8 for the network or 10.0.0.5/32"),
        ("fe80::%eth0/64", "no zone"),
        ("::ffff:10.0.0.0/104", "IPv4 network"),
        ("10.0.0.0/33", "expected a network"),
        ("10.0.0.0/8 ", "expected a network"),
        ("", "expected a network"),
        ("example.org", "expected a network"),
    ],
)
def test_ambiguous_or_malformed_networks_are_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_network(text)
    assert says in str(refused.value)


def test_a_set_holds_the_addresses_of_its_networks_and_nothing_else() -> None:
    nets = NetworkSet(
        parse_network(t) for t in ("10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::1/128")
    )
    for inside in ("10.255.0.1", "192.0.2.7", "::ffff:10.0.0.1", "2001:db8:ffff::1", "::1"):
        assert nets.holds(inside), inside
    for outside in ("11.0.0.1", "192.0.2.8", "2001:db9::1", "::2", "fe80::1%lo", "10.0.0.1:80"):
        assert not nets.holds(outside), outside
    assert not nets.holds("/run/fairgate.sock")  # a Unix socket peer is no address


def test_an_empty_set_holds_nothing_and_is_false() -> None:
    empty = NetworkSet(())
    assert not empty
    assert not empty.holds("127.0.0.1")
    assert NetworkSet([parse_network("::/0")])


_v4_networks = st.builds(
    lambda a, p: ipaddress.IPv4Network((a, p), strict=False),
    st.integers(0, 2**32 - 1),
    st.integers(0, 32),
)
_v6_networks = st.builds(
    lambda a, p: ipaddress.IPv6Network((a, p), strict=False),
    st.integers(0, 2**128 - 1),
    st.integers(0, 128),
).filter(lambda n: n.network_address.ipv4_mapped is None)
_networks = st.one_of(_v4_networks, _v6_networks)
_addresses = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6))


@pytest.mark.fuzz
@given(st.lists(_networks, max_size=8), _addresses)
def test_membership_agrees_with_the_standard_library(
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    ip = address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    expected = any(ip.version == n.version and ip in n for n in networks)
    assert NetworkSet(networks).holds(str(address)) is expected


@pytest.mark.fuzz
@given(_networks)
def test_a_network_written_back_reads_as_itself(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> None:
    assert parse_network(str(network)) == network
    assert parse_network(str(network.network_address)).prefixlen == network.max_prefixlen


@pytest.mark.fuzz
@given(st.text(max_size=60))
def test_parsing_refuses_with_a_value_error_or_gives_what_it_read(text: str) -> None:
    address = parse_address(text)
    assert address is None or ("%" not in text and parse_address(str(address)) == address)
    try:
        network = parse_network(text)
    except ValueError:
        return
    assert parse_network(str(network)) == network
