"""Failed authentications are counted across gateways sharing Redis, not once per gateway.

Two gateway processes on one Redis prefix, each allowing 5 failed
authentications a minute per client network; a client sprays unknown keys
from one address, alternating between them. Counted per process, the network
would get 10 refusals of 401 (5 on each); counted in Redis it gets 5, then
429s on both gateways, and a valid key is still served.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest
from tests.e2e.conftest import AUTH, StartGateway, StartSim, model

pytestmark = [pytest.mark.slow, pytest.mark.redis]

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def test_a_spray_through_two_gateways_gets_one_allowance(
    start_sim: StartSim, start_gateway: StartGateway, redis_state: dict[str, Any]
) -> None:
    sim = start_sim("--model", "m", "--speed", "0")
    auth = {"failures_per_minute": 5}
    gateways = [start_gateway([model("m", sim)], state=redis_state, auth=auth) for _ in range(2)]
    statuses = []
    for i in range(14):
        spray = {"authorization": f"Bearer fg-{secrets.token_urlsafe(32)}"}
        answer = httpx.post(
            gateways[i % 2].url + "/v1/chat/completions", json=BODY, headers=spray, timeout=30
        )
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            assert answer.json()["error"]["code"] == "too_many_auth_failures"
    assert statuses.count(401) == 5, statuses
    assert statuses[5:] == [429] * 9, statuses  # on both gateways, each saw only 2 or 3
    for gateway in gateways:  # a valid key is not locked out
        answer = httpx.post(
            gateway.url + "/v1/chat/completions", json=BODY, headers=AUTH, timeout=30
        )
        assert answer.status_code == 200, answer.text
