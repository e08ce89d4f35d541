"""Engine kinds by name, and the package's public names."""

from __future__ import annotations

import pytest

import fairgate.engines
from fairgate.engines import ENGINE_KINDS, MetricNames, adapter_for


def test_each_kind_has_its_adapter() -> None:
    kinds = {kind: adapter_for(kind) for kind in ENGINE_KINDS}
    assert set(kinds) == {"vllm", "llama-server", "openai"}
    for kind, adapter in kinds.items():
        assert adapter.kind == kind
    assert kinds["vllm"].rewrites_body
    assert not kinds["llama-server"].rewrites_body
    assert not kinds["openai"].rewrites_body
    assert kinds["vllm"].health_path == "/health"
    assert kinds["llama-server"].health_path == "/health"
    assert kinds["openai"].health_path == "/v1/models"


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown engine kind"):
        adapter_for("tgi")


def test_metric_names_can_be_overridden_without_touching_the_default() -> None:
    names = MetricNames(running="sglang:num_running_reqs")
    adapter = adapter_for("vllm", names)
    assert adapter.metric_names == names
    assert adapter.rewrites_body
    assert adapter_for("vllm").metric_names.running == "vllm:num_requests_running"


def test_exported_names() -> None:
    assert set(fairgate.engines.__all__) >= {
        "EngineAdapter",
        "EngineLoad",
        "MODEL_UNREADABLE",
        "MetricNames",
        "ModelUnreadable",
        "EndpointKind",
        "UpstreamRequestBody",
        "adapter_for",
        "extract_model",
        "normalize_path",
        "parse_engine_metrics",
        "upstream_headers",
    }
    for name in fairgate.engines.__all__:
        assert hasattr(fairgate.engines, name), name
