"""The X-Forwarded-For walk: only trusted proxies are believed, and only from the right."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgate.core.cidr import NetworkSet, parse_address, parse_network
from fairgate.core.client_addr import MAX_HOPS, ClientAddresses

PROXY = "10.0.0.5"
CLIENTS = ClientAddresses(NetworkSet(parse_network(n) for n in ("10.0.0.0/8", "2001:db8:f::/48")))


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        # an untrusted connection is its own client, whatever it claims
        ("192.0.2.7", ["10.0.0.1"], "192.0.2.7"),
        ("192.0.2.7", ["1.2.3.4"], "192.0.2.7"),
        # a trusted proxy without the header: the proxy is the client
        (PROXY, [], PROXY),
        # the first untrusted entry from the right is the client
        (PROXY, ["192.0.2.7"], "192.0.2.7"),
        (PROXY, ["192.0.2.7, 10.0.0.9"], "192.0.2.7"),
        # spoofed entries left of the client are never used
        (PROXY, ["6.6.6.6, 10.0.0.1, 192.0.2.7"], "192.0.2.7"),
        (PROXY, ["10.0.0.1, 192.0.2.7, 10.0.0.9"], "192.0.2.7"),
        # several header lines are one list, in order
        (PROXY, ["6.6.6.6", "192.0.2.7", "10.0.0.9"], "192.0.2.7"),
        (PROXY, [b"6.6.6.6, 192.0.2.7", b"10.0.0.9"], "192.0.2.7"),
        # whitespace around entries is nothing
        (PROXY, [" \t192.0.2.7 \t,10.0.0.9  "], "192.0.2.7"),
        # every hop trusted: the leftmost one
        (PROXY, ["10.0.0.8, 10.0.0.9"], "10.0.0.8"),
        # something that is not a plain address stops the walk at the last trusted hop
        (PROXY, ["192.0.2.7, garbage"], PROXY),
        (PROXY, ["192.0.2.7, 10.0.0.9, garbage"], PROXY),
        (PROXY, ["192.0.2.7, garbage, 10.0.0.9"], "10.0.0.9"),
        (PROXY, ["192.0.2.7:4711"], PROXY),  # ports are refused, not stripped
        (PROXY, ["[2001:db8::1]:443"], PROXY),
        (PROXY, ["fe80::1%eth0"], PROXY),  # zoned
        (PROXY, ["192.0.2.7, fe80::1%eth0, 10.0.0.9"], "10.0.0.9"),
        (PROXY, ["192.0.2.7,,10.0.0.9"], "10.0.0.9"),  # an empty entry
        (PROXY, [""], PROXY),
        (PROXY, ["unknown"], PROXY),
        # IPv6 and IPv4-mapped entries, normalised
        (PROXY, ["2001:DB8::7"], "2001:db8::7"),
        (PROXY, ["::ffff:192.0.2.7"], "192.0.2.7"),
        (PROXY, ["192.0.2.7, ::ffff:10.0.0.9"], "192.0.2.7"),  # mapped proxy: trusted
        (PROXY, ["192.0.2.7, 2001:db8:f::1"], "192.0.2.7"),
        # the peer itself may be IPv4-mapped (a dual-stack listener) or IPv6
        ("::ffff:10.0.0.5", ["192.0.2.7"], "192.0.2.7"),
        ("2001:db8:f::5", ["192.0.2.7"], "192.0.2.7"),
        ("2001:db8:e::5", ["192.0.2.7"], "2001:db8:e::5"),
        # a Unix socket peer is not trusted
        ("/run/fairgate.sock", ["192.0.2.7"], "/run/fairgate.sock"),
    ],
)
def test_the_walk(peer: str, forwarded: list[str | bytes], client: str) -> None:
    assert CLIENTS.resolve(peer, forwarded) == client


def _trusted_chain(n: int) -> str:
    return ", ".join(f"10.0.{i // 256}.{i % 256}" for i in range(n))


def test_sixty_four_trusted_hops_are_walked_and_the_sixty_fifth_is_not() -> None:
    # 64 trusted entries right of the client: the walk ends on the 64th, never
    # reaching the client (nor anything the client wrote)
    chain = "192.0.2.7, " + _trusted_chain(MAX_HOPS)
    assert CLIENTS.resolve(PROXY, [chain]) == "10.0.0.0"
    # 63 trusted entries: the 64th read is the client
    chain = "192.0.2.7, " + _trusted_chain(MAX_HOPS - 1)
    assert CLIENTS.resolve(PROXY, [chain]) == "192.0.2.7"


def test_a_huge_header_resolves_like_its_last_entries() -> None:
    spoofed = ", ".join(["6.6.6.6"] * 20_000)
    assert CLIENTS.resolve(PROXY, [spoofed + ", 192.0.2.7, 10.0.0.9"]) == "192.0.2.7"


def test_without_trusted_proxies_the_headers_are_never_read() -> None:
    class Untouchable:
        def __iter__(self) -> object:
            raise AssertionError("headers scanned")

    plain = ClientAddresses(NetworkSet(()))
    assert plain.of("10.0.0.5", Untouchable()) == "10.0.0.5"  # type: ignore[arg-type]
    assert CLIENTS.of("192.0.2.1", Untouchable()) == "192.0.2.1"  # type: ignore[arg-type]


def test_of_reads_every_forwarded_for_line_from_asgi_headers() -> None:
    headers = [
        (b"host", b"gw"),
        (b"x-forwarded-for", b"6.6.6.6, 192.0.2.7"),
        (b"x-real-ip", b"1.1.1.1"),
        (b"x-forwarded-for", b"10.0.0.9"),
    ]
    assert CLIENTS.of(PROXY, headers) == "192.0.2.7"


# -- properties -------------------------------------------------------------------------

_trusted_v4 = st.integers(0, 2**24 - 1).map(lambda i: f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
_untrusted_v4 = st.ip_addresses(v=4).map(str).filter(lambda a: not a.startswith("10."))
_entries = st.one_of(
    _trusted_v4,
    _untrusted_v4,
    st.ip_addresses(v=6).map(str),
    st.sampled_from(["", "garbage", "fe80::1%eth0", "192.0.2.1:80", "[::1]:80", "unknown"]),
    st.text(alphabet=st.characters(blacklist_characters=","), max_size=12),
)
_headers = st.lists(st.lists(_entries, max_size=8).map(", ".join), max_size=4)
_peers = st.one_of(_trusted_v4, _untrusted_v4, st.just("::ffff:10.0.0.1"))


def _entries_of(forwarded: list[str]) -> list[str]:
    return [e.strip(" \t") for e in ",".join(forwarded).split(",")] if forwarded else []


@pytest.mark.fuzz
@given(_peers, _headers)
def test_the_client_is_the_peer_or_an_entry_never_left_of_an_untrusted_one(
    peer: str, forwarded: list[str]
) -> None:
    client = CLIENTS.resolve(peer, forwarded)
    if client == peer:
        return
    assert CLIENTS.trusted.holds(peer)
    entries = _entries_of(forwarded)
    normal = [str(parse_address(e)) if parse_address(e) else None for e in entries]
    assert client in normal
    position = len(normal) - 1 - normal[::-1].index(client)
    # everything right of the client is a trusted, plain address
    for right in entries[position + 1 :]:
        assert CLIENTS.trusted.holds(right), (right, entries)
    assert len(entries) - position <= MAX_HOPS


@pytest.mark.fuzz
@given(_peers, _headers)
def test_a_client_may_prepend_anything_without_changing_who_it_is(
    peer: str, forwarded: list[str]
) -> None:
    """What a client writes left of the entry the first proxy appended is never read."""
    client = CLIENTS.resolve(peer, ["192.0.2.7", *forwarded])
    spoofed = CLIENTS.resolve(peer, ["6.6.6.6, garbage, 10.0.0.1, 192.0.2.7", *forwarded])
    assert spoofed == client


@pytest.mark.fuzz
@given(st.text(max_size=40), st.lists(st.text(max_size=80), max_size=4))
def test_the_walk_never_raises(peer: str, forwarded: list[str]) -> None:
    assert isinstance(CLIENTS.resolve(peer, forwarded), str)
    raw = [f.encode("utf-8", "surrogatepass") for f in forwarded]
    assert isinstance(CLIENTS.resolve(PROXY, raw), str)
