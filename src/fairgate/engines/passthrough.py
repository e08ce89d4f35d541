"""Engines that get the client's body byte for byte: ``llama-server`` and ``openai``.

Nothing is injected: no ``stream_options``, no salt, no priority. The only
exception is a model alias: when the client named the model by an alias,
the engine must still receive its own id, so the body is re-encoded with
``model`` replaced and nothing else changed (JSON through orjson, which also
collapses duplicate keys; multipart part by part with the same boundary).
Usage is read from the answer when the engine sends it, otherwise the proxy
estimates it and flags the record as estimated.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from fairgate.engines.adapter import EndpointTableAdapter
from fairgate.engines.body import UpstreamRequestBody

__all__ = ["PassThroughAdapter"]


@dataclass(frozen=True, slots=True)
class PassThroughAdapter(EndpointTableAdapter):
    """Relays the body untouched unless an alias forces the ``model`` to be replaced."""

    def prepare_body(self, req: UpstreamRequestBody) -> bytes:
        if req.client_model is None or req.client_model == req.upstream_model:
            return req.raw
        form = req.form()
        if form is not None:
            return form.with_text("model", req.upstream_model).encode()
        document = req.json_object()
        document["model"] = req.upstream_model
        return orjson.dumps(document)
