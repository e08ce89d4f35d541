"""Fuzzing the bearer path with the verifier in the loop: a real gateway with a ``jwt:`` block.

Whatever the bearer (arbitrary strings, three dot-separated segments of anything, JWS-shaped
tokens whose header and payload are arbitrary JSON, real tokens with a segment swapped), the
answer is the bad key's 401, byte for byte: never a 500, never another body, and the gateway
keeps serving a valid token afterwards.
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.e2e.conftest import model, write_config
from tests.oidc_provider.fixture import OidcProvider

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class Setup:
    gateway: GatewayProcess
    provider: OidcProvider
    client: httpx.Client
    refused: bytes
    token: str

    def status(self, bearer: str) -> tuple[int, bytes]:
        answer = self.client.post(
            self.gateway.url + "/v1/chat/completions",
            json=CHAT,
            headers={"authorization": f"Bearer {bearer}"},
        )
        return answer.status_code, answer.content


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("jwt-fuzz")
    with SimProcess("--model", "m", "--speed", "0") as sim, OidcProvider() as provider:
        config = write_config(
            directory,
            [model("m", sim)],
            auth={
                "failures_per_minute": 0,
                "failures_per_minute_ipv4_24": 0,
                "failures_per_minute_ipv6_48": 0,
                "failures_per_minute_ipv6_32": 0,
            },
            jwt={
                "issuer": provider.issuer,
                "audience": "fairgate",
                "type": "at+jwt",
                "map": [{"value": "lab-t", "team": "t"}],
            },
        )
        with (
            GatewayProcess(config, startup_timeout=120) as gateway,
            httpx.Client(timeout=30) as client,
        ):
            token = provider.mint(sub="fuzz", groups=["lab-t"])
            made = Setup(gateway, provider, client, b"", token)
            status, refused = made.status("fg-" + "x" * 43)
            assert status == 401
            made.refused = refused
            assert made.status(token)[0] == 200
            yield made


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# what an HTTP header value may hold (anything else is the HTTP parser's 400, before auth)
_HEADER_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
_SEGMENT = st.text(alphabet=string.ascii_letters + string.digits + "-_=+/", max_size=200)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_ALG = st.sampled_from(
    ["RS256", "ES256", "PS256", "EdDSA", "HS256", "none", "None", "", "RS1", "ES512"]
) | st.text(max_size=8)


def _header() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"alg": _ALG},
        optional={
            "kid": st.text(max_size=20) | st.integers(),
            "typ": st.sampled_from(["at+jwt", "JWT", "application/at+jwt"]) | st.text(max_size=8),
            "crit": st.lists(st.text(max_size=5), max_size=2),
            "jku": st.just("https://evil.example/jwks"),
        },
    )


def _assert_refused(setup: Setup, bearer: str) -> None:
    status, body = setup.status(bearer)
    assert status == 401, (status, body, bearer[:200])
    assert body == setup.refused


@FUZZ
@given(bearer=st.text(alphabet=_HEADER_CHARS, min_size=1, max_size=300))
def test_any_bearer_string_is_the_bad_key_401(setup: Setup, bearer: str) -> None:
    bearer = bearer.strip(" ")  # a header value ends in no space (the client refuses it)
    if bearer:
        _assert_refused(setup, bearer)


@FUZZ
@given(parts=st.lists(_SEGMENT, min_size=3, max_size=3))
def test_three_segments_of_anything_are_the_bad_key_401(setup: Setup, parts: list[str]) -> None:
    _assert_refused(setup, ".".join(parts))


@FUZZ
@given(header=_header(), payload=_JSON, signature=_SEGMENT)
def test_jws_shaped_garbage_is_the_bad_key_401(
    setup: Setup, header: dict[str, Any], payload: Any, signature: str
) -> None:
    token = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}.{signature}"
    _assert_refused(setup, token)


@FUZZ
@given(
    which=st.integers(min_value=0, max_value=2),
    replacement=_SEGMENT,
    claims=st.dictionaries(st.sampled_from(["iss", "aud", "exp", "nbf", "sub", "groups"]), _JSON),
)
def test_a_real_token_with_a_segment_replaced_is_the_bad_key_401(
    setup: Setup, which: int, replacement: str, claims: dict[str, Any]
) -> None:
    parts = setup.token.split(".")
    if which == 1 and claims:
        replacement = _b64(json.dumps(claims).encode())
    if parts[which] == replacement:
        return
    parts[which] = replacement
    _assert_refused(setup, ".".join(parts))


def test_the_valid_token_is_still_served_after_the_fuzzing(setup: Setup) -> None:
    assert setup.status(setup.token)[0] == 200
