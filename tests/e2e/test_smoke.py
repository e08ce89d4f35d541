"""The gateway in front of a simulated engine answers the official OpenAI SDK."""

from __future__ import annotations

import openai
from tests.e2e.conftest import TEST_KEY, StartGateway, StartSim, model


def test_chat_through_the_gateway(start_sim: StartSim, start_gateway: StartGateway) -> None:
    sim = start_sim("--speed", "0", "--model", "m")
    gw = start_gateway([model("m", sim, aliases=["alias-m"])])
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=TEST_KEY, max_retries=0)
    answer = client.chat.completions.create(
        model="alias-m", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert answer.usage is not None and answer.usage.completion_tokens == 4
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
        )
    )
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 3
    assert all(c.usage is None for c in chunks)  # the gateway's usage chunk is stripped
    received = sim.requests()
    assert received[-1]["body"].count("include_usage") == 1
