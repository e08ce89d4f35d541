"""The client network rule, shared by the failure limiter and the connection caps."""

from __future__ import annotations

from fairgate.core.network import V6_TAG, network_of


def test_an_ipv4_address_is_its_own_network() -> None:
    assert network_of("192.0.2.7") == 0xC0000207
    assert network_of("192.0.2.7") != network_of("192.0.2.8")


def test_an_ipv6_address_counts_as_its_64() -> None:
    assert network_of("2001:db8::1") == network_of("2001:db8::ffff:ffff:ffff:1")
    assert network_of("2001:db8::1") != network_of("2001:db8:0:1::1")
    assert network_of("2001:db8::1") == V6_TAG | 0x20010DB800000000


def test_an_ipv4_mapped_address_is_the_ipv4_address_and_levels_never_collide() -> None:
    assert network_of("::ffff:192.0.2.7") == network_of("192.0.2.7")
    assert network_of("::c000:207") != network_of("192.0.2.7")  # a /64 is tagged


def test_a_peer_that_is_not_an_ip_address_is_its_text() -> None:
    assert network_of("/run/fairgate.sock") == "/run/fairgate.sock"
    assert network_of("") == ""
