"""vLLM: every body is parsed and re-encoded, so the client cannot steer the engine.

Removed from the top level of every JSON body (and as form fields of
multipart bodies), whatever their spelling in the raw bytes, since the parse
already resolved escapes such as ``"\\u0070riority"`` and kept only the last
of duplicate keys:

    priority            the gateway decides it (``X-Vllm-Priority`` header)
    cache_salt          the gateway sets its own per tenant scope
    kv_transfer_params  engine-to-engine KV transfer (disaggregated serving)
    ec_transfer_params  encoder-cache transfer, likewise
    vllm_xargs          free-form arguments for engine extensions
    request_id          the engine's internal request id
    extra_body          never meaningful on the wire (SDKs flatten it)

Then ``model`` is set to the engine's id, every output-cap field of the route
(``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) is set to the
cap the gateway reserved for (so a request without one cannot run to the end of
the context, and ``ignore_eos`` or ``min_tokens`` cannot outlast it),
``stream_options.include_usage`` is
set when the gateway wants the usage chunk of a stream (the client's other
stream options are kept), and ``cache_salt`` is set when the gateway gives one.
Multimodal content-part ``uuid`` values are left as they are for now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from fairgate.engines.adapter import EndpointTableAdapter
from fairgate.engines.body import UpstreamRequestBody

__all__ = ["STRIPPED_FIELDS", "VllmAdapter"]

STRIPPED_FIELDS = frozenset(
    {
        "priority",
        "cache_salt",
        "kv_transfer_params",
        "ec_transfer_params",
        "vllm_xargs",
        "request_id",
        "extra_body",
    }
)


def _with_usage(options: Any) -> Any:
    if options is None:
        return {"include_usage": True}
    if isinstance(options, dict):
        return {**options, "include_usage": True}
    return options  # not an object: left for the engine to refuse


@dataclass(frozen=True, slots=True)
class VllmAdapter(EndpointTableAdapter):
    """Re-encodes every body (see the module text) and sends ``x-vllm-priority``."""

    @property
    def rewrites_body(self) -> bool:
        return True

    @property
    def sends_priority(self) -> bool:
        return True

    def prepare_body(self, req: UpstreamRequestBody) -> bytes:
        form = req.form()
        if form is not None:
            return form.without(STRIPPED_FIELDS).with_text("model", req.upstream_model).encode()
        if req.parsed is None and not req.raw:
            return b""
        document = req.json_object()
        if not STRIPPED_FIELDS.isdisjoint(document):  # most bodies hold none of them
            for key in STRIPPED_FIELDS:
                document.pop(key, None)
        document["model"] = req.upstream_model
        if req.max_tokens is not None:
            for field in req.cap_fields:
                document[field] = req.max_tokens
        if req.stream and req.include_usage:
            document["stream_options"] = _with_usage(document.get("stream_options"))
        if req.cache_salt is not None:
            document["cache_salt"] = req.cache_salt
        return orjson.dumps(document)
