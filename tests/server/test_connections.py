"""Connection caps counted per listener and per client network (no sockets)."""

from __future__ import annotations

import logging

import orjson
import pytest

from fairgate.core.cidr import NetworkSet, parse_network
from fairgate.server.connections import ConnectionCaps, Refusal


def code(refusal: object) -> str:
    assert isinstance(refusal, Refusal), refusal
    head, _, body = refusal.answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ") and b"connection: close" in head
    assert int(head.split(b"content-length: ")[1]) == len(body)
    error = orjson.loads(body)["error"]
    assert error["type"] == "service_unavailable"
    return str(error["code"])


def test_a_network_over_its_cap_is_refused_while_another_connects() -> None:
    caps = ConnectionCaps("client", total=10, per_network=2)
    held = [caps.open("127.0.0.1"), caps.open("127.0.0.1")]
    assert code(caps.open("127.0.0.1")) == "too_many_connections_from_network"
    assert not isinstance(caps.open("127.0.0.2"), Refusal)
    # the same IPv6 /64 is one network, whatever the address in it
    caps.open("2001:db8::1")
    caps.open("2001:db8::2")
    assert code(caps.open("2001:db8::3")) == "too_many_connections_from_network"
    assert not isinstance(caps.open("2001:db8:0:1::1"), Refusal)
    caps.close(held[0])
    assert not isinstance(caps.open("127.0.0.1"), Refusal)  # a closed one is given back


def test_the_listener_cap_counts_every_network() -> None:
    caps = ConnectionCaps("client", total=3, per_network=None)
    networks = [caps.open("127.0.0.1") for _ in range(3)]  # no per-network cap
    assert caps.open_connections == 3
    assert code(caps.open("127.0.0.9")) == "too_many_connections"
    for network in networks:
        caps.close(network)
    assert caps.open_connections == 0
    assert not isinstance(caps.open("127.0.0.9"), Refusal)


def test_refusals_are_logged_with_their_count_not_one_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caps = ConnectionCaps("client", total=1, per_network=1)
    caps.open("127.0.0.1")
    with caplog.at_level(logging.WARNING, logger="fairgate.server"):
        for _ in range(50):
            caps.open("127.0.0.1")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "client listener: refused 1 connection(s)" in lines[0]


def test_caps_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionCaps("client", total=0, per_network=None)


def test_each_refusal_is_counted_by_reason() -> None:
    reasons: list[str] = []
    caps = ConnectionCaps("client", total=2, per_network=1, on_refused=reasons.append)
    caps.open("127.0.0.1")
    caps.open("127.0.0.1")
    caps.open("127.0.0.2")
    caps.open("127.0.0.3")
    assert reasons == ["max_connections_per_network", "max_connections"]


def test_a_trusted_proxy_is_not_held_to_the_cap_of_one_network_but_to_the_listener_total() -> None:
    proxies = NetworkSet([parse_network("127.0.0.2")])
    caps = ConnectionCaps("client", total=6, per_network=1, exempt=proxies)
    held = [caps.open("127.0.0.2") for _ in range(4)]  # one proxy, four clients behind it
    assert not any(isinstance(h, Refusal) for h in held)
    other = caps.open("127.0.0.3")
    assert not isinstance(other, Refusal)
    assert code(caps.open("127.0.0.3")) == "too_many_connections_from_network"
    held.append(caps.open("127.0.0.2"))
    assert code(caps.open("127.0.0.2")) == "too_many_connections"  # the total still holds
    for network in held:
        caps.close(network)
    assert caps.open_connections == 1
    assert code(caps.open("127.0.0.3")) == "too_many_connections_from_network"  # still counted
    caps.close(other)
    assert caps.open_connections == 0
