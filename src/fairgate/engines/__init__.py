"""One adapter per engine kind: path policy, body rewrite, headers, metric names.

Pure: no I/O, no event loop, no clock. The proxy uses it in this order:

    path = normalize_path(scope["raw_path"])            # None → 404
    route = adapter.endpoint(path) if path else None        # None → 404
    model = extract_model(content_type, body, parsed)    # route.carries_model: check, fail-closed
    data = adapter.prepare_body(UpstreamRequestBody(...))
    headers = adapter.headers(internal_key=..., ..., priority=priority, host=replica.host)

Errors raised here (both ``fairgate.core.errors``):

    GatewayError
    └── BadRequest   a body that must be rewritten cannot be read; a client
                     Content-Type/Accept holding control characters

``ValueError`` marks a programming or configuration error (unknown kind,
invalid internal key).
"""

from __future__ import annotations

from fairgate.engines.adapter import EndpointTableAdapter, EngineAdapter
from fairgate.engines.body import UpstreamRequestBody
from fairgate.engines.endpoints import (
    LLAMA_SERVER_ROUTES,
    OPENAI_ROUTES,
    VLLM_ROUTES,
    EndpointKind,
    UsageShape,
)
from fairgate.engines.form import parse_form
from fairgate.engines.headers import upstream_headers
from fairgate.engines.kinds import ENGINE_KINDS, adapter_for
from fairgate.engines.metrics import (
    LLAMA_SERVER_METRICS,
    NO_METRICS,
    VLLM_METRICS,
    EngineLoad,
    MetricNames,
    parse_engine_metrics,
)
from fairgate.engines.model_field import MODEL_UNREADABLE, ModelUnreadable, extract_model, is_json
from fairgate.engines.passthrough import PassThroughAdapter
from fairgate.engines.path import normalize_path
from fairgate.engines.policy import (
    LLAMA_SERVER_POLICY,
    OPENAI_POLICY,
    VLLM_POLICY,
    FieldRefused,
    RequestPolicy,
    policy_for,
)
from fairgate.engines.vllm import STRIPPED_FIELDS, VllmAdapter

__all__ = [
    "ENGINE_KINDS",
    "LLAMA_SERVER_METRICS",
    "LLAMA_SERVER_POLICY",
    "LLAMA_SERVER_ROUTES",
    "MODEL_UNREADABLE",
    "NO_METRICS",
    "OPENAI_POLICY",
    "OPENAI_ROUTES",
    "STRIPPED_FIELDS",
    "VLLM_METRICS",
    "VLLM_POLICY",
    "VLLM_ROUTES",
    "EndpointKind",
    "EndpointTableAdapter",
    "EngineAdapter",
    "EngineLoad",
    "FieldRefused",
    "MetricNames",
    "ModelUnreadable",
    "PassThroughAdapter",
    "RequestPolicy",
    "UpstreamRequestBody",
    "UsageShape",
    "VllmAdapter",
    "adapter_for",
    "extract_model",
    "is_json",
    "normalize_path",
    "parse_engine_metrics",
    "parse_form",
    "policy_for",
    "upstream_headers",
]
