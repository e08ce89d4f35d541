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

from fairgate.engines.output import NO_OUTPUT, UNCAPPED, Output

__all__ = [
    "LLAMA_SERVER_ROUTES",
    "OPENAI_ROUTES",
    "VLLM_ROUTES",
    "EndpointKind",
    "UsageShape",
]

UsageShape = Literal["chat", "completion", "embedding", "response", "llama", "none"]
"""Where token usage appears in an answer on the route:

``chat``/``completion``: ``usage`` object (``prompt_tokens``, ``completion_tokens``),
in the last SSE chunk when streaming with ``stream_options.include_usage``;
``response``: ``response.usage`` (``input_tokens``, ``output_tokens``), in the
``response.completed`` event when streaming; ``embedding``: ``usage`` with
``prompt_tokens`` only (embeddings, rerank, score, classify, pooling);
``llama``: llama-server's native ``tokens_evaluated``/``tokens_predicted`` (and
``timings.cache_n``), in the answer or in each ``"stop": true`` event of a stream;
``none``: no usage in the answer, the proxy charges the reservation and flags it.
"""


@dataclass(frozen=True, slots=True)
class EndpointKind:
    """One allowed route of one engine kind.

    ``path`` is the canonical upstream path to send (never the client's
    spelling). ``carries_model`` is true on every route whose body can name a
    model: the proxy checks the model there and fails closed. ``streams`` is
    true where the engine can answer with SSE. ``method`` is the only HTTP
    method the route accepts. ``output`` says which body fields bound what the
    engine generates (``engines.output``). ``usage_per_sequence`` is true where
    each usage object the engine reports counts one sequence only, however many
    the request runs: llama-server's OpenAI routes run a task per prompt and per
    choice, and its answer to several keeps the first task's ``usage`` (a stream
    sends one per task).
    """

    path: str
    carries_model: bool
    streams: bool
    usage: UsageShape
    method: Literal["GET", "POST"] = "POST"
    output: Output = NO_OUTPUT
    usage_per_sequence: bool = False


def _post(
    path: str,
    usage: UsageShape,
    output: Output = NO_OUTPUT,
    *,
    streams: bool = False,
    per_sequence: bool = False,
) -> EndpointKind:
    return EndpointKind(
        path=path,
        carries_model=True,
        streams=streams,
        usage=usage,
        output=output,
        usage_per_sequence=per_sequence,
    )


def _table(*routes: EndpointKind) -> Mapping[str, EndpointKind]:
    table = {route.path: route for route in routes}
    if len(table) != len(routes):
        raise ValueError("duplicate path in a route table")
    return MappingProxyType(table)


# The fields each engine reads as the output cap, in the engine's order of precedence.
_CHAT = Output(("max_completion_tokens", "max_tokens"))
# vLLM runs a sequence per entry of ``prompt`` and of ``prompt_embeds`` (--enable-prompt-embeds)
_COMPLETION = Output(("max_tokens",), prompts=("prompt", "prompt_embeds"))
_RESPONSE = Output(("max_output_tokens",))
# llama-server reads ``n_predict`` first, then ``max_tokens``, on every generating route,
# its Responses route included (the body is copied whole into a chat request, with
# ``max_output_tokens`` as its ``max_tokens``). ``max_completion_tokens`` is read only by
# builds since early 2026 (older ones run to the end of the context with it alone): it
# raises the bound, but a body must also carry a field every build reads.
_LLAMA_CHAT = Output(
    ("n_predict", "max_completion_tokens", "max_tokens"), honoured=("n_predict", "max_tokens")
)
_LLAMA_COMPLETION = Output(("n_predict", "max_tokens"), prompts=("prompt",))
_LLAMA_RESPONSE = Output(
    ("n_predict", "max_output_tokens", "max_completion_tokens", "max_tokens"),
    honoured=("n_predict", "max_output_tokens", "max_tokens"),
)


def _openai(
    chat: Output, completion: Output, response: Output, *, per_sequence: bool = False
) -> tuple[EndpointKind, ...]:
    return (
        _post("/v1/chat/completions", "chat", chat, streams=True, per_sequence=per_sequence),
        _post("/v1/completions", "completion", completion, streams=True, per_sequence=per_sequence),
        _post("/v1/embeddings", "embedding"),
        _post("/v1/responses", "response", response, streams=True, per_sequence=per_sequence),
        EndpointKind("/v1/models", carries_model=False, streams=False, usage="none", method="GET"),
    )


_OPENAI = _openai(_CHAT, _COMPLETION, _RESPONSE)

# Behind ``engine: openai`` may run any server, llama-server among them, which reads
# ``n_predict`` before the OpenAI fields: present, it raises the bound; the body must
# still carry an OpenAI cap field, the one a server that ignores ``n_predict`` obeys.
_ANY_CHAT = Output(
    ("max_completion_tokens", "max_tokens", "n_predict"),
    honoured=("max_completion_tokens", "max_tokens"),
)
_ANY_COMPLETION = Output(
    ("max_tokens", "n_predict"), prompts=("prompt", "prompt_embeds"), honoured=("max_tokens",)
)
_ANY_RESPONSE = Output(("max_output_tokens", "n_predict"), honoured=("max_output_tokens",))

OPENAI_ROUTES: Mapping[str, EndpointKind] = _table(
    *_openai(_ANY_CHAT, _ANY_COMPLETION, _ANY_RESPONSE)
)
"""Any OpenAI-compatible server: the five OpenAI routes and nothing else."""

VLLM_ROUTES: Mapping[str, EndpointKind] = _table(
    *_OPENAI,
    _post("/v1/audio/transcriptions", "none", UNCAPPED, streams=True),
    _post("/v1/audio/translations", "none", UNCAPPED, streams=True),
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

LLAMA_SERVER_ROUTES: Mapping[str, EndpointKind] = _table(
    *_openai(_LLAMA_CHAT, _LLAMA_COMPLETION, _LLAMA_RESPONSE, per_sequence=True),
    _post("/chat/completions", "chat", _LLAMA_CHAT, streams=True, per_sequence=True),
    _post("/v1/audio/transcriptions", "none", UNCAPPED, streams=True),
    _post("/completion", "llama", _LLAMA_COMPLETION, streams=True),
    _post("/completions", "llama", _LLAMA_COMPLETION, streams=True),
    _post("/infill", "llama", _LLAMA_COMPLETION, streams=True),
    _post("/v1/infill", "llama", _LLAMA_COMPLETION, streams=True),
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
not an OpenAI usage object, hence ``usage="llama"``)."""
