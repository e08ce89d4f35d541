"""Engine-internal routes are unreachable through the gateway, however their path is spelt.

Raw sockets, so no client library tidies the path first. Behind the gateway
are a llama-server simulator (which really serves ``/slots`` and ``/props``)
and a vLLM one; every attempt must answer 404 in the OpenAI envelope from the
gateway itself, and neither simulator may record a request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import orjson
import pytest
from tests.e2e.conftest import model, write_config
from tests.e2e.raw_client import check_error, raw_request, request_bytes

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

INTERNAL = [
    "/slots",
    "/props",
    "/metrics",
    "/health",
    "/lora-adapters",
    "/invocations",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/server_info",
    "/reset_prefix_cache",
    "/sleep",
    "/collective_rpc",
    "/start_profile",
    "/version",
    "/api/generate",
]
# Sub-paths and neighbours of allowed routes that must not match them.
NEAR_MISSES = [
    "/slots/0",
    "/slotsfoo",
    "/v1/chat/completions/render",
    "/v1/responses/resp_1",
    "/v1/responses/resp_1/cancel",
    "/inference/v1/generate",
    "/v1/messages",
]


def spellings(path: str) -> list[str]:
    """Ways of writing ``path`` that a naive prefix or string match would let through."""
    head, tail = path[1], path[2:]  # "/slots" → "s", "lots"
    encoded = "".join(f"%{ord(c):02x}" for c in path[1:])
    return [
        path,
        path.upper(),
        path[:2].upper() + path[2:],
        path + "/",
        "/" + path,
        path.replace("/", "//"),
        "/./" + path[1:],
        "/v1/../" + path[1:],
        "/v1/models/../.." + path,
        "/v1/chat/completions/../../.." + path,
        "/v1/%2e%2e/" + path[1:],
        "/v1/%2E%2E/" + path[1:],
        "/v1/%252e%252e/" + path[1:],
        "/v1/%25252e%25252e/" + path[1:],
        "/v1/..%2f" + path[1:],
        "/v1/..%252f" + path[1:],
        "/%2f" + path[1:],
        "/v1%2f..%2f" + path[1:],
        f"/%{ord(head):02x}{tail}",
        f"/%25{ord(head):02x}{tail}",
        "/" + encoded,
        path + "%00",
        path + "%20",
        path + "%09",
        path + ";x",
        path + "?model=m",
        path + "/.",
        path + "/x/..",
        "http://127.0.0.1" + path,
    ]


@dataclass(frozen=True, slots=True)
class Env:
    vllm: SimProcess
    llama: SimProcess
    gateway: GatewayProcess

    def recorded(self) -> list[str]:
        return [r["path"] for sim in (self.vllm, self.llama) for r in sim.requests()]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with ExitStack() as stack:
        vllm = stack.enter_context(SimProcess("--speed", "0", "--model", "m"))
        llama = stack.enter_context(
            SimProcess("--speed", "0", "--model", "l", "--personality", "llama-server")
        )
        config = write_config(
            tmp_path_factory.mktemp("gw"),
            [model("m", vllm), model("l", llama, engine="llama-server")],
        )
        yield Env(vllm, llama, stack.enter_context(GatewayProcess(config)))


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    env.vllm.reset()
    env.llama.reset()


def refusals(env: Env, paths: list[str], model_name: str) -> list[str]:
    """Send each path as GET and as POST; return a line for each answer that is not our 404."""
    body = orjson.dumps({"model": model_name, "prompt": "hi", "messages": [], "n_predict": 1})
    wrong: list[str] = []
    for path in paths:
        for method in ("GET", "POST"):
            data = request_bytes(
                method,
                path,
                headers=[("Content-Type", "application/json")],
                body=body if method == "POST" else b"",
            )
            answer = raw_request(env.gateway.url, data)
            try:
                check_error(
                    answer.status, answer.header("x-request-id"), answer.body, 404, "unknown_route"
                )
            except (AssertionError, ValueError) as problem:
                wrong.append(f"{method} {path}: {answer.status} {answer.body[:120]!r} {problem}")
    return wrong


@pytest.mark.parametrize("path", INTERNAL)
@pytest.mark.parametrize("model_name", ["l", "m"])
def test_internal_routes_are_404_in_every_spelling(env: Env, path: str, model_name: str) -> None:
    assert refusals(env, spellings(path), model_name) == []
    assert env.recorded() == []


def test_near_misses_of_allowed_routes_are_404(env: Env) -> None:
    paths = [p for near in NEAR_MISSES for p in (near, near.upper(), "/v1/../" + near[1:])]
    assert refusals(env, paths, "m") + refusals(env, paths, "l") == []
    assert env.recorded() == []


def test_a_route_of_another_engine_kind_is_404_for_this_model(env: Env) -> None:
    # /completion is llama-server's own route; /v2/rerank and /pooling are vLLM's.
    assert refusals(env, ["/completion", "/infill", "/apply-template"], "m") == []
    assert refusals(env, ["/v2/rerank", "/pooling", "/classify", "/score"], "l") == []
    assert env.recorded() == []


def test_the_engine_receives_the_canonical_path_not_the_spelling(env: Env) -> None:
    body = orjson.dumps({"model": "l", "prompt": "hi", "n_predict": 1})
    for path in ("/Completion/", "/v1/../completion", "//completion?x=1", "/%63ompletion"):
        answer = raw_request(
            env.gateway.url,
            request_bytes("POST", path, headers=[("Content-Type", "application/json")], body=body),
        )
        assert answer.status == 200, (path, answer.body)
    assert [(r["path"], r["query"]) for r in env.llama.requests()] == [("/completion", "")] * 4
