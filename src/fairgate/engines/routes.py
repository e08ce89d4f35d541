"""The route allowlists: which canonical paths each engine kind may be sent.

Fail-closed: a path that is not a key of its kind's table answers 404. The
tables hold inference routes only; every engine-internal route (``/slots``,
``/props``, ``/metrics``, ``/health``, ``/lora-adapters``, ``/invocations``,
``/v1/load_lora_adapter``, ``/sleep``, ``/collective_rpc``, profiling, …) and
every sub-path of any route is absent on purpose. Lookups are exact matches on
a path already reduced by ``normalize_path``, so ``/slots/0`` and ``/slotsfoo``
are refused like ``/slots``.

Checked against the engines' own route registrations: vLLM's FastAPI routers
(chat, completion, responses, pooling, scoring, speech-to-text, tokenize) and
llama.cpp's ``tools/server`` route table. Routes deliberately left out although
the engine serves them: vLLM ``GET /v1/responses/{id}`` and ``…/cancel`` (the
engine's response store is shared by every tenant), the ``…/render`` routes,
``/inference/v1/generate`` (token-level disaggregation API), Anthropic
``/v1/messages`` and Ollama ``/api/*`` (other wire formats for usage).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = [
    "LLAMA_SERVER_ROUTES",
    "OPENAI_ROUTES",
    "VLLM_ROUTES",
    "RouteKind",
    "UsageShape",
]

UsageShape = Literal["chat", "completion", "embedding", "response", "none"]
"""Where token usage appears in an answer on the route:

``chat``/``completion``: ``usage`` object (``prompt_tokens``, ``completion_tokens``),
in the last SSE chunk when streaming with ``stream_options.include_usage``;
``response``: ``response.usage`` (``input_tokens``, ``output_tokens``), in the
``response.completed`` event when streaming; ``embedding``: ``usage`` with
``prompt_tokens`` only (embeddings, rerank, score, classify, pooling);
``none``: no OpenAI-shaped usage, the proxy estimates and flags it.
"""


@dataclass(frozen=True, slots=True)
class RouteKind:
    """One allowed route of one engine kind.

    ``path`` is the canonical upstream path to send (never the client's
    spelling). ``carries_model`` is true on every route whose body can name a
    model: the proxy checks the model there and fails closed. ``streams`` is
    true where the engine can answer with SSE. ``method`` is the only HTTP
    method the route accepts.
    """

    path: str
    carries_model: bool
    streams: bool
    usage: UsageShape
    method: Literal["GET", "POST"] = "POST"


def _post(path: str, usage: UsageShape, *, streams: bool = False) -> RouteKind:
    return RouteKind(path=path, carries_model=True, streams=streams, usage=usage)


def _table(*routes: RouteKind) -> Mapping[str, RouteKind]:
    table = {route.path: route for route in routes}
    if len(table) != len(routes):
        raise ValueError("duplicate path in a route table")
    return MappingProxyType(table)


_OPENAI = (
    _post("/v1/chat/completions", "chat", streams=True),
    _post("/v1/completions", "completion", streams=True),
    _post("/v1/embeddings", "embedding"),
    _post("/v1/responses", "response", streams=True),
    RouteKind("/v1/models", carries_model=False, streams=False, usage="none", method="GET"),
)

OPENAI_ROUTES: Mapping[str, RouteKind] = _table(*_OPENAI)
"""Any OpenAI-compatible server: the five OpenAI routes and nothing else."""

VLLM_ROUTES: Mapping[str, RouteKind] = _table(
    *_OPENAI,
    _post("/v1/audio/transcriptions", "none", streams=True),
    _post("/v1/audio/translations", "none", streams=True),
    _post("/rerank", "embedding"),
    _post("/v1/rerank", "embedding"),
    _post("/v2/rerank", "embedding"),
    _post("/score", "embedding"),
    _post("/v1/score", "embedding"),
    _post("/classify", "embedding"),
    _post("/pooling", "embedding"),
    _post("/tokenize", "none"),
    _post("/detokenize", "none"),
)
"""vLLM: the OpenAI routes plus its native inference routes."""

LLAMA_SERVER_ROUTES: Mapping[str, RouteKind] = _table(
    *_OPENAI,
    _post("/chat/completions", "chat", streams=True),
    _post("/v1/audio/transcriptions", "none", streams=True),
    _post("/completion", "none", streams=True),
    _post("/completions", "none", streams=True),
    _post("/infill", "none", streams=True),
    _post("/v1/infill", "none", streams=True),
    _post("/embedding", "none"),
    _post("/embeddings", "none"),
    _post("/rerank", "embedding"),
    _post("/reranking", "embedding"),
    _post("/v1/rerank", "embedding"),
    _post("/v1/reranking", "embedding"),
    _post("/tokenize", "none"),
    _post("/detokenize", "none"),
    _post("/apply-template", "none"),
)
"""llama.cpp ``llama-server``: the OpenAI routes plus its native inference routes
(the native ``/completion`` answers report ``tokens_evaluated``/``tokens_predicted``,
not an OpenAI usage object, hence ``usage="none"``)."""
