"""Engine kinds by their configuration name: the one place adapters are built.

adapter_for("vllm").endpoint("/v1/chat/completions").streams   is True
adapter_for("openai").endpoint("/tokenize")                     is None
"""

from __future__ import annotations

from fairgate.engines.adapter import EngineAdapter
from fairgate.engines.endpoints import LLAMA_SERVER_ROUTES, OPENAI_ROUTES, VLLM_ROUTES
from fairgate.engines.metrics import LLAMA_SERVER_METRICS, NO_METRICS, VLLM_METRICS, MetricNames
from fairgate.engines.passthrough import PassThroughAdapter
from fairgate.engines.vllm import VllmAdapter

__all__ = ["ENGINE_KINDS", "adapter_for"]

ENGINE_KINDS: tuple[str, ...] = ("vllm", "llama-server", "openai")


def _build(kind: str) -> EngineAdapter:
    if kind == "vllm":
        return VllmAdapter("vllm", VLLM_ROUTES, VLLM_METRICS, "/health")
    if kind == "llama-server":
        return PassThroughAdapter(
            "llama-server", LLAMA_SERVER_ROUTES, LLAMA_SERVER_METRICS, "/health"
        )
    if kind == "openai":
        # A generic server may have no health route; listing models needs the key
        # and a working server, which is what "healthy" should mean.
        return PassThroughAdapter("openai", OPENAI_ROUTES, NO_METRICS, "/v1/models")
    raise ValueError(f"unknown engine kind {kind!r} (one of: {', '.join(ENGINE_KINDS)})")


def adapter_for(kind: str, metric_names: MetricNames | None = None) -> EngineAdapter:
    """The adapter of engine ``kind``, with its default metric names unless overridden.

    Raises ``ValueError`` for a kind not in ``ENGINE_KINDS``.
    """
    adapter = _build(kind)
    return adapter if metric_names is None else adapter.with_metric_names(metric_names)
