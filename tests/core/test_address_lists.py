"""IP allowlists of a key: what a list accepts, how it is written back, which addresses pass."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fairgate.core.address_lists import MAX_CIDRS, AddressRule, parse_cidrs


def test_networks_are_written_back_in_their_normal_form_each_once() -> None:
    entries = ["10.0.0.0/8", "192.0.2.7", "2001:DB8:0::/32", "10.0.0.0/8", "::1"]
    assert parse_cidrs(entries) == ("10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32", "::1/128")


def test_bits_beyond_the_prefix_are_refused_naming_the_entry_and_the_network() -> None:
    with pytest.raises(ValueError) as refused:
        parse_cidrs(["192.0.2.0/24", "10.0.0.5/8"])
    message = str(refused.value)
    assert message.startswith("cidrs[1]: '10.0.0.5/8' has host bits set")
    assert "10.0.0.0/8" in message


@pytest.mark.parametrize(
    "entry",
    [
        "",
        " 10.0.0.0/8",
        "10.0.0.0/33",
        "lab-network",
        "10.0.0",
        "fe80::1%eth0",
        "::ffff:10.0.0.0/104",
    ],
)
def test_what_is_not_a_network_is_refused_by_its_position(entry: str) -> None:
    with pytest.raises(ValueError, match=r"^cidrs\[2\]: "):
        parse_cidrs(["10.0.0.0/8", "2001:db8::/32", entry])


def test_a_list_is_bounded() -> None:
    many = [f"10.0.{i // 256}.{i % 256}" for i in range(MAX_CIDRS + 1)]
    assert len(parse_cidrs(many[:MAX_CIDRS])) == MAX_CIDRS
    with pytest.raises(ValueError, match=f"at most {MAX_CIDRS}"):
        parse_cidrs(many)


def rule(*lists: tuple[str, list[str] | None]) -> AddressRule:
    made = AddressRule.of(lists)
    assert made is not None
    return made


def test_every_list_must_hold_the_address_and_the_refusal_names_the_first_that_does_not() -> None:
    r = rule(
        ("org o", ["10.0.0.0/8"]),
        ("team t", ["10.1.0.0/16", "10.2.0.0/16"]),
        ("key k", ["10.2.0.0/16"]),
    )
    assert r.refusal("10.2.3.4") is None
    assert r.refusal("10.1.3.4") == "key k"  # organisation and team hold it, the key's list not
    assert r.refusal("10.3.0.1") == "team t"
    assert r.refusal("192.0.2.1") == "org o"


def test_an_ipv4_client_on_a_dual_stack_socket_passes_an_ipv4_list_and_no_ipv6_one() -> None:
    assert rule(("org o", ["192.0.2.0/24"])).refusal("::ffff:192.0.2.9") is None
    assert rule(("org o", ["192.0.2.0/24"])).refusal("::ffff:198.51.100.1") == "org o"
    assert rule(("org o", ["::/0"])).refusal("192.0.2.1") == "org o"
    assert rule(("org o", ["::/0"])).refusal("::ffff:192.0.2.1") == "org o"
    assert rule(("org o", ["0.0.0.0/0"])).refusal("::1") == "org o"


def test_what_is_not_a_plain_ip_address_is_in_no_list() -> None:
    everywhere = rule(("key k", ["0.0.0.0/0", "::/0"]))
    for peer in ["", "/run/fairgate.sock", "fe80::1%lo", "192.0.2.1:443"]:
        assert everywhere.refusal(peer) == "key k", peer


def test_a_stored_entry_that_does_not_parse_allows_nothing_rather_than_everything() -> None:
    assert rule(("key k", ["garbage"])).refusal("192.0.2.1") == "key k"


def test_no_list_no_rule_and_an_absent_list_does_not_count() -> None:
    assert AddressRule.of([("org o", None), ("team t", None), ("key k", None)]) is None
    r = rule(("org o", None), ("team t", ["10.0.0.0/8"]), ("key k", None))
    assert [name for name, _ in r.lists] == ["team t"]


_V4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
_V6 = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)
_NETWORKS = st.one_of(
    st.tuples(_V4, st.integers(0, 32)).map(lambda a: ipaddress.ip_network(a, strict=False)),
    st.tuples(_V6, st.integers(0, 128)).map(lambda a: ipaddress.ip_network(a, strict=False)),
)


def _near(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> st.SearchStrategy[str]:
    """Addresses at, inside and just outside ``network``'s edges."""
    cls = type(network.network_address)
    top = 2**network.max_prefixlen - 1
    first, last = int(network.network_address), int(network.broadcast_address)
    edges = [max(first - 1, 0), first, last, min(last + 1, top)]
    return st.one_of(st.sampled_from(edges), st.integers(first, last)).map(lambda i: str(cls(i)))


@pytest.mark.fuzz
@given(st.lists(_NETWORKS, min_size=1, max_size=8), st.data())
def test_parsing_and_matching_agree_with_ipaddress_membership(
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network], data: st.DataObject
) -> None:
    assume(not any(n.version == 6 and n.network_address.ipv4_mapped for n in networks))
    stored = parse_cidrs([str(n) for n in networks])
    one = rule(("key k", list(stored)))
    addresses = [data.draw(_near(n)) for n in networks] + [data.draw(_V4.map(str) | _V6.map(str))]
    for addr in addresses:
        ip = ipaddress.ip_address(addr)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # an IPv4 client on a dual-stack socket
        expected = any(ip in ipaddress.ip_network(n) for n in stored)
        assert (one.refusal(addr) is None) is expected, (addr, stored)
