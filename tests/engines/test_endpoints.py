"""Route allowlists per engine kind, after normalisation, fail-closed."""

from __future__ import annotations

import pytest

from fairgate.engines import ENGINE_KINDS, EndpointKind, adapter_for, normalize_path

OPENAI = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/models",
]
VLLM_NATIVE = [
    "/v1/rerank",
    "/rerank",
    "/v2/rerank",
    "/v1/score",
    "/score",
    "/tokenize",
    "/detokenize",
    "/pooling",
    "/classify",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
]
LLAMA_NATIVE = [
    "/completion",
    "/completions",
    "/chat/completions",
    "/infill",
    "/v1/infill",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/embedding",
    "/embeddings",
    "/v1/rerank",
    "/rerank",
    "/reranking",
    "/v1/reranking",
    "/v1/audio/transcriptions",
]
ALLOWED = {
    "vllm": OPENAI + VLLM_NATIVE,
    "llama-server": OPENAI + LLAMA_NATIVE,
    "openai": OPENAI,
}

# Engine-internal routes of vLLM and llama-server: state of other tenants,
# adapters, profiling, sleep, RPC. None may be reached through any kind.
INTERNAL = [
    "/slots",
    "/props",
    "/metrics",
    "/lora-adapters",
    "/invocations",
    "/ping",
    "/health",
    "/v1/health",
    "/version",
    "/load",
    "/server_info",
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/sleep",
    "/wake_up",
    "/is_sleeping",
    "/collective_rpc",
    "/start_profile",
    "/stop_profile",
    "/pause",
    "/resume",
    "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
    "/get_tokenizer_info",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/api/show",
    "/api/tags",
    "/api/chat",
    "/models",
    "/cors-proxy",
]
# Served by an engine, left out on purpose (see engines/endpoints.py).
OMITTED = [
    "/v1/responses/resp_123",
    "/v1/responses/resp_123/cancel",
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/inference/v1/generate",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/chat/completions/input_tokens",
    "/v1/realtime",
    "/v1/models/some-model",
]


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_allowed_routes_map_to_their_canonical_path(kind: str) -> None:
    adapter = adapter_for(kind)
    for path in ALLOWED[kind]:
        route = adapter.endpoint(path)
        assert route is not None, path
        assert route.path == path


@pytest.mark.parametrize("kind", ENGINE_KINDS)
@pytest.mark.parametrize("path", INTERNAL + OMITTED)
def test_internal_and_omitted_routes_are_refused(kind: str, path: str) -> None:
    adapter = adapter_for(kind)
    assert adapter.endpoint(path) is None
    for sub in (path + "/0", path + "/x/y", path + "foo"):
        assert adapter.endpoint(sub) is None, sub


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_native_routes_of_other_kinds_are_refused(kind: str) -> None:
    adapter = adapter_for(kind)
    others = set(VLLM_NATIVE + LLAMA_NATIVE) - set(ALLOWED[kind])
    assert others, kind
    for path in others:
        assert adapter.endpoint(path) is None, path


@pytest.mark.parametrize(
    "raw",
    [
        "/slots",
        "/SLOTS",
        "/slots/",
        "//slots",
        "/./slots",
        "/v1/../slots",
        "/v1/%2e%2e/slots",
        "/v1/%252e%252e/slots",
        "/Slots/0",
        "/%73lots",
        "/v1/chat/completions/../../metrics",
        "/v1/chat/completions/%2e%2e/%2e%2e/props",
        "/lora-adapters/",
        "/INVOCATIONS",
        "/v1/LOAD_LORA_ADAPTER",
    ],
)
@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_no_spelling_of_an_internal_route_gets_through(kind: str, raw: str) -> None:
    path = normalize_path(raw)
    assert path is None or adapter_for(kind).endpoint(path) is None


@pytest.mark.parametrize(
    "raw", ["/V1/Chat/Completions/", "/v1//chat/completions", "/v1/x/../chat/completions"]
)
def test_odd_spellings_of_an_allowed_route_reach_the_canonical_path(raw: str) -> None:
    path = normalize_path(raw)
    assert path is not None
    route = adapter_for("vllm").endpoint(path)
    assert route is not None
    assert route.path == "/v1/chat/completions"


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_every_post_route_carries_a_model_and_models_listing_is_a_get(kind: str) -> None:
    adapter = adapter_for(kind)
    for path in ALLOWED[kind]:
        route = adapter.endpoint(path)
        assert isinstance(route, EndpointKind)
        if path == "/v1/models":
            assert route.method == "GET"
            assert not route.carries_model
        else:
            assert route.method == "POST"
            assert route.carries_model, path


def test_usage_shapes_and_streaming_of_the_openai_routes() -> None:
    adapter = adapter_for("openai")
    shapes = {p: (r.usage, r.streams) for p in OPENAI if (r := adapter.endpoint(p)) is not None}
    assert shapes == {
        "/v1/chat/completions": ("chat", True),
        "/v1/completions": ("completion", True),
        "/v1/embeddings": ("embedding", False),
        "/v1/responses": ("response", True),
        "/v1/models": ("none", False),
    }


def test_llama_native_completions_report_llama_usage_and_read_n_predict_first() -> None:
    for path in ("/completion", "/completions", "/infill", "/v1/infill"):
        route = adapter_for("llama-server").endpoint(path)
        assert route is not None
        assert route.usage == "llama"
        assert route.streams
        assert route.output.fields[0] == "n_predict"


def test_every_generating_route_has_an_output_bound() -> None:
    # a route that generates either names its cap fields or is assumed (audio only)
    for kind in ("vllm", "llama-server", "openai"):
        adapter = adapter_for(kind)
        for path, route in adapter.endpoints.items():  # type: ignore[attr-defined]
            if route.output.generates and not route.output.fields:
                assert "audio" in path, (kind, path)
            if route.usage in ("chat", "completion", "response", "llama"):
                assert route.output.fields, (kind, path)
