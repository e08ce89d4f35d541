"""The llama-server personality: native ``/completion``/``/infill`` bodies, ``/slots``, ``/props``.

These exist so a gateway's path policy can be tested against the engine-internal
routes it must refuse; their shapes follow llama.cpp's ``tools/server`` closely
enough for a client that reads ``content``, ``stop`` and ``tokens_predicted``.
A native stream is ``data: {...}`` events and no ``[DONE]``: the last event has
``"stop": true`` and the timings.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from fairgate.sim.config import SimConfig
from fairgate.sim.output import Usage, sse

__all__ = ["LlamaFormat", "props_body", "slots_body"]


class LlamaFormat:
    """Native completion bodies and events for one request."""

    media_type = b"text/event-stream"

    def __init__(self, model: str, n_predict: int) -> None:
        self.model = model
        self.n_predict = n_predict
        self._started = time.monotonic()
        self._prompt_tokens = 0

    def whole(self, text: str, usage: Usage, finish: str) -> bytes:
        return orjson.dumps(self._final(text, usage, finish))

    def token(self, piece: str, index: int, finish: str | None) -> bytes:
        return sse(
            {
                "index": 0,
                "content": piece,
                "tokens": [],
                "stop": False,
                "id_slot": -1,
                "tokens_predicted": index + 1,
            }
        )

    def closing(self, text: str, usage: Usage, finish: str, include_usage: bool) -> bytes:
        return sse(self._final("", usage, finish))

    def _final(self, text: str, usage: Usage, finish: str) -> dict[str, Any]:
        elapsed_ms = (time.monotonic() - self._started) * 1000.0
        return {
            "index": 0,
            "content": text,
            "tokens": [],
            "id_slot": 0,
            "stop": True,
            "model": self.model,
            "tokens_predicted": usage.completion,
            "tokens_evaluated": usage.prompt,
            "tokens_cached": usage.prompt + usage.completion,
            "generation_settings": {"n_predict": self.n_predict},
            "prompt": "",
            "has_new_line": False,
            "truncated": False,
            "stop_type": "limit" if finish == "length" else "eos",
            "stopping_word": "",
            "timings": {
                "prompt_n": usage.prompt - usage.cached,
                "cache_n": usage.cached,
                "predicted_n": usage.completion,
                "predicted_ms": elapsed_ms,
                "predicted_per_second": usage.completion / max(elapsed_ms / 1000.0, 1e-9),
            },
        }


def slots_body(config: SimConfig, busy: int) -> bytes:
    """``GET /slots``: one entry per batch slot, the first ``busy`` processing."""
    n_ctx = config.context_length
    slots = [
        {
            "id": i,
            "id_task": i if i < busy else -1,
            "n_ctx": n_ctx,
            "speculative": False,
            "is_processing": i < busy,
            "params": {"n_predict": -1, "temperature": 0.8, "seed": config.seed},
            "prompt": "",
            "next_token": {"has_next_token": i < busy, "n_remain": -1, "n_decoded": 0},
        }
        for i in range(config.max_num_seqs)
    ]
    return orjson.dumps(slots)


def props_body(config: SimConfig) -> bytes:
    """``GET /props``: the server's defaults and model."""
    model = config.models[0]
    return orjson.dumps(
        {
            "default_generation_settings": {
                "id": 0,
                "n_ctx": config.context_length,
                "params": {"n_predict": -1, "temperature": 0.8, "seed": config.seed},
            },
            "total_slots": config.max_num_seqs,
            "model_alias": model,
            "model_path": f"/models/{model}.gguf",
            "modalities": {"vision": False, "audio": False},
            "chat_template": "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>"
            "{% endfor %}<|assistant|>",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "build_info": "fairgate-sim",
        }
    )
