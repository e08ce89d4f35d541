"""The identify stage (``proxy.identify``): what the request head decides before the
credential is checked, and the principal it becomes."""

from __future__ import annotations

import logging

import orjson
import pytest

from fairgate.auth import invalid_credential
from fairgate.core.cidr import NetworkSet, parse_network
from fairgate.core.errors import Forbidden, Unauthorized
from fairgate.core.principal import Principal
from fairgate.core.route_classes import LOOPBACK, RouteRules
from fairgate.proxy.exchange import Exchange
from fairgate.proxy.identify import Identify

ALICE = Principal("key-alice", "org-a", "team-a")


class Keys:
    """The credential check the stage hands the bearer to: one known key; what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[bytes | None, str]] = []

    async def __call__(self, authorization: bytes | None, client: str) -> Principal:
        self.asked.append((authorization, client))
        if authorization != b"Bearer fg-alice":
            raise invalid_credential()
        return ALICE


def exchange(client: str = "127.0.0.1", credentials: int = 1) -> Exchange:
    ex = Exchange("r1", "POST", "/v1/chat/completions", 0.0, client=client)
    ex.credentials = credentials
    return ex


async def test_the_bearer_becomes_the_principal_on_the_exchange() -> None:
    keys = Keys()
    ex = exchange()
    assert await Identify(keys).enter(ex, b"Bearer fg-alice") is ALICE
    assert ex.principal is ALICE
    assert keys.asked == [(b"Bearer fg-alice", "127.0.0.1")]


async def test_a_key_and_a_second_credential_get_the_bad_key_401_unchecked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a valid key beside another credential (a token, an x-api-key): never a silent choice
    keys = Keys()
    with caplog.at_level(logging.INFO, "fairgate.proxy"), pytest.raises(Unauthorized) as refused:
        await Identify(keys).enter(exchange(credentials=2), b"Bearer fg-alice")
    assert refused.value.body() == invalid_credential().body()  # byte for byte a bad key's
    assert keys.asked == []  # refused before the key is even looked at
    assert "2 credentials" in caplog.text


async def test_a_client_outside_the_inference_networks_is_refused_before_its_key() -> None:
    keys = Keys()
    stage = Identify(
        keys, RouteRules({"inference": NetworkSet(parse_network(c) for c in LOOPBACK)})
    )
    with pytest.raises(Forbidden) as refused:
        await stage.enter(exchange(client="192.0.2.7"), b"Bearer fg-alice")
    assert orjson.loads(refused.value.body())["error"]["code"] == "forbidden"
    assert keys.asked == []
    # the same key from inside the networks is served
    assert await stage.enter(exchange(client="127.0.0.9"), b"Bearer fg-alice") is ALICE


async def test_a_bad_key_is_refused_by_the_credential_check() -> None:
    with pytest.raises(Unauthorized):
        await Identify(Keys()).enter(exchange(), b"Bearer fg-mallory")
