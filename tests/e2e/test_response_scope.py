"""``previous_response_id``: one organisation cannot continue another's response.

Two keys of two organisations call a real gateway in front of the simulator's
``/v1/responses``. The owner of a response continues it; the other organisation
naming the same id is refused with 400 naming the field, exactly as for an id
that never existed, and the engine never receives the request. With Redis as
the state back end, a second gateway replica agrees with the first.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from tests.e2e.conftest import AUTH, TEST_KEY, add_key, model, write_config

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

ORGS = [
    {"name": "test-org", "share": 0.5, "teams": ["t", "t2"]},
    {"name": "org-b", "share": 0.5, "teams": ["tb"]},
]


def create(
    url: str, key: str, *, stream: bool = False, previous: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"model": "m", "input": "hello", "max_output_tokens": 3}
    if stream:
        body["stream"] = True
    if previous is not None:
        body["previous_response_id"] = previous
    return httpx.post(
        url + "/v1/responses", json=body, headers={"authorization": f"Bearer {key}"}, timeout=30
    )


def response_id(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        for line in answer.text.splitlines():
            if line.startswith("data:") and '"response.created"' in line:
                value: str = orjson.loads(line[5:])["response"]["id"]
                return value
        raise AssertionError("no response.created event")
    identifier: str = answer.json()["id"]
    return identifier


def assert_refused(answer: httpx.Response) -> dict[str, Any]:
    assert answer.status_code == 400, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert error["code"] == "field_not_allowed"
    assert "'previous_response_id'" in error["message"]
    return error


def posted(sim: SimProcess) -> int:
    return len(sim.requests(path="/v1/responses"))


@pytest.fixture
def gateways(
    tmp_path: Path, state: dict[str, Any]
) -> Iterator[tuple[SimProcess, list[str], str, str]]:
    """The simulator, one gateway (two sharing Redis with the redis back end), B's key,
    and a key of A's other team."""
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--speed", "0", "--model", "m"))
        config = write_config(tmp_path, [model("m", sim)], orgs=ORGS, state=state)
        key_b = add_key(config, "tb")
        key_a2 = add_key(config, "t2")
        replicas = 2 if state["backend"] == "redis" else 1
        urls = [stack.enter_context(GatewayProcess(config)).url for _ in range(replicas)]
        yield sim, urls, key_b, key_a2


@pytest.mark.parametrize("stream", [False, True])
def test_only_the_owner_continues_a_response(
    gateways: tuple[SimProcess, list[str], str, str], stream: bool
) -> None:
    sim, urls, key_b, key_a2 = gateways
    first = response_id(create(urls[0], TEST_KEY, stream=stream))
    assert first.startswith("resp_")
    last = urls[-1]  # the other replica when there are two
    assert create(last, TEST_KEY, previous=first).status_code == 200
    # the scope is the organisation (cache_isolation.scope's default): another key of
    # another team of A continues it too
    assert create(last, key_a2, previous=first).status_code == 200
    seen = posted(sim)
    foreign = assert_refused(create(last, key_b, previous=first))
    unknown = assert_refused(create(last, key_b, previous="resp_" + "0" * 32))
    assert foreign == unknown  # nothing tells B whether the id exists
    assert posted(sim) == seen  # the engine never saw B's attempts
    # B's own responses are B's: A cannot continue them either
    second = response_id(create(last, key_b, stream=stream))
    assert create(urls[0], key_b, previous=second).status_code == 200
    assert_refused(create(urls[0], TEST_KEY, previous=second))


def test_a_malformed_id_is_refused_and_requests_without_one_are_untouched(
    gateways: tuple[SimProcess, list[str], str, str],
) -> None:
    _sim, urls, _key_b, _key_a2 = gateways
    answer = httpx.post(
        urls[0] + "/v1/responses",
        json={"model": "m", "input": "hi", "max_output_tokens": 2, "previous_response_id": 7},
        headers=AUTH,
        timeout=30,
    )
    assert_refused(answer)
    nested = httpx.post(
        urls[0] + "/v1/responses",
        json={
            "model": "m",
            "input": "hi",
            "max_output_tokens": 2,
            "extra_body": {"previous_response_id": "resp_x"},
        },
        headers=AUTH,
        timeout=30,
    )
    assert_refused(nested)
    assert create(urls[0], TEST_KEY).status_code == 200
