"""Request bodies → what the engine needs: prompt ids, output length, priority, salt.

Validation follows vLLM where a gateway can tell the difference: an unknown model
is 404, anything malformed is 400 (never 422), a non-zero priority under
``fcfs`` is 400 with vLLM's message, and the ``X-Vllm-Priority`` header wins
over the body's ``priority``. The llama-server personality ignores the model
name, the priority and the salt, as llama-server does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from fairgate.core.errors import BadRequest, NotFound
from fairgate.sim.config import SimConfig
from fairgate.sim.tokenizer import Tokenizer

__all__ = ["Generation", "InputParser"]


@dataclass(slots=True)
class Generation:
    """One generation request, parsed.

    ``max_tokens`` is what will be generated; ``explicit_max`` says whether the
    client set it (finish reason ``length``) or the default applied (``stop``).
    ``priority`` is ``None`` when the personality has no priorities.
    ``continuous_usage``: every token's event carries the usage so far
    (``stream_options.continuous_usage_stats`` with ``include_usage``, vLLM).
    """

    model: str
    prompt: list[int]
    max_tokens: int
    explicit_max: bool
    stream: bool
    include_usage: bool
    priority: int | None
    salt: str | None
    continuous_usage: bool = False


class InputParser:
    """Parses each route's body; raises ``BadRequest``/``NotFound`` with vLLM's wording."""

    def __init__(self, config: SimConfig, tokenizer: Tokenizer) -> None:
        self._config = config
        self._tokenizer = tokenizer
        # Embeddings are a function of the ids, so they always need exact ones.
        self._exact = tokenizer if tokenizer.exact else Tokenizer(tokenizer.seed)
        self._models = frozenset(config.models)
        self._llama = config.personality == "llama-server"

    def json(self, body: bytes) -> dict[str, Any]:
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"Invalid JSON body: {exc}") from None
        if not isinstance(value, dict):
            raise BadRequest("The request body must be a JSON object")
        return value

    def model(self, body: Mapping[str, Any]) -> str:
        model = body.get("model")
        if model is None:
            return self._config.models[0]
        if not isinstance(model, str):
            raise BadRequest("model must be a string")
        if model not in self._models and not self._llama:
            raise NotFound(f"The model `{model}` does not exist.", code="model_not_found")
        return model

    def chat(self, body: Mapping[str, Any], priority_header: bytes | None) -> Generation:
        model = self.model(body)
        extra = [orjson.dumps(body["tools"]).decode()] if body.get("tools") else []
        prompt = self._tokenizer.chat(body.get("messages"), extra)
        limit = self._cap(body, "max_completion_tokens", "max_tokens")
        return self._generation(model, body, prompt, limit, priority_header, "messages")

    def completion(self, body: Mapping[str, Any], priority_header: bytes | None) -> Generation:
        model = self.model(body)
        prompt = self._prompt(body.get("prompt"))
        limit = self._cap(body, "max_tokens")
        return self._generation(model, body, prompt, limit, priority_header, "prompt")

    def _cap(self, body: Mapping[str, Any], *fields: str) -> int | None:
        """The output cap of an OpenAI route: llama-server reads ``n_predict`` first on
        every generating route (-1: no limit), vLLM only the OpenAI fields."""
        if not self._llama:
            return _first_int(body, *fields)
        n_predict = _first_int(body, "n_predict", *fields)
        return None if n_predict is not None and n_predict < 0 else n_predict

    def responses(self, body: Mapping[str, Any], priority_header: bytes | None) -> Generation:
        model = self.model(body)
        prompt: list[int] = []
        if isinstance(body.get("instructions"), str):
            prompt = self._tokenizer.chat([{"role": "system", "content": body["instructions"]}])
            prompt.pop()  # the generation prompt comes once, after the input
        value = body.get("input")
        if isinstance(value, str):
            value = [{"role": "user", "content": value}]
        if not isinstance(value, list) or not value:
            raise BadRequest("input must be a string or a non-empty list of items")
        messages = [_as_message(item) for item in value]
        prompt += self._tokenizer.chat(messages)
        # llama-server copies the body into a chat request, max_output_tokens as its
        # max_tokens: n_predict comes first there too
        fields = ("max_output_tokens", "max_tokens") if self._llama else ("max_output_tokens",)
        limit = self._cap(body, *fields)
        return self._generation(model, body, prompt, limit, priority_header, "input")

    def llama_completion(self, body: Mapping[str, Any], *, infill: bool) -> Generation:
        model = self.model(body)
        prompt = self._prompt(body.get("prompt", ""), allow_empty=infill)
        if infill:
            for key in ("input_prefix", "input_suffix"):
                text = body.get(key, "")
                if not isinstance(text, str):
                    raise BadRequest(f"{key} must be a string")
                prompt += self._tokenizer.encode(text)
            if not prompt:
                raise BadRequest("infill needs input_prefix, input_suffix or prompt")
        # llama-server reads n_predict, then max_tokens; -1 (or absent) runs to the context's end
        n_predict = _first_int(body, "n_predict", "max_tokens")
        limit = None if n_predict is not None and n_predict < 0 else n_predict
        return self._generation(model, body, prompt, limit, None, "prompt")

    def embedding_inputs(self, body: Mapping[str, Any]) -> list[list[int]]:
        value = body.get("input")
        if isinstance(value, str):
            return [self._exact.encode(value)]
        if isinstance(value, list) and value:
            if all(_is_id(v) for v in value):
                return [list(value)]
            if all(isinstance(v, str) for v in value):
                return [self._exact.encode(v) for v in value]
            if all(isinstance(v, list) and all(_is_id(t) for t in v) for v in value):
                return [list(v) for v in value]
        raise BadRequest("input must be a string, a list of strings or a list of token ids")

    def _prompt(self, value: object, *, allow_empty: bool = False) -> list[int]:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
            value = value[0]
        if isinstance(value, str):
            ids = self._tokenizer.encode(value)
        elif isinstance(value, list) and all(_is_id(v) for v in value):
            ids = list(value)
        else:
            raise BadRequest(
                "prompt must be one string or one list of token ids "
                "(the simulator takes one prompt per request)"
            )
        if not ids and not allow_empty:
            raise BadRequest("The prompt cannot be empty")
        return ids

    def _generation(
        self,
        model: str,
        body: Mapping[str, Any],
        prompt: list[int],
        limit: int | None,
        priority_header: bytes | None,
        what: str,
    ) -> Generation:
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest("stream must be a boolean")
        include_usage = _include_usage(body.get("stream_options"), stream)
        n = body.get("n", 1)
        if n != 1:
            raise BadRequest("n must be 1: the simulator generates one choice per request")
        if limit is not None and limit < 1:
            raise BadRequest("max_tokens must be at least 1")
        room = self._config.context_length - len(prompt)
        wanted = limit if limit is not None else min(self._config.max_tokens_default, room)
        if wanted > room or room < 1:
            raise BadRequest(
                f"This model's maximum context length is {self._config.context_length} tokens. "
                f"However, you requested {len(prompt) + wanted} tokens ({len(prompt)} in the "
                f"{what}, {wanted} in the completion). Please reduce the length of the "
                f"{what} or completion."
            )
        explicit = limit is not None
        eos = self._config.eos_after
        if eos is not None and eos < wanted and body.get("ignore_eos") is not True:
            wanted, explicit = eos, False  # the model ends its answer before the cap
        return Generation(
            model=model,
            prompt=prompt,
            max_tokens=wanted,
            explicit_max=explicit,
            stream=stream,
            include_usage=include_usage,
            priority=None if self._llama else self._priority(body, priority_header),
            salt=None if self._llama else _salt(body),
            continuous_usage=include_usage
            and not self._llama
            and _continuous_usage(body.get("stream_options")),
        )

    def _priority(self, body: Mapping[str, Any], header: bytes | None) -> int:
        if header is not None:
            try:
                priority = int(header)
            except ValueError:
                raise BadRequest(
                    f"X-Vllm-Priority header must be an integer, got {header.decode('latin-1')!r}"
                ) from None
        else:
            priority = body.get("priority", 0)
            if not _is_int(priority):
                raise BadRequest("priority must be an integer")
        if priority != 0 and self._config.scheduling_policy != "priority":
            raise BadRequest(f"Got priority {priority} but Priority scheduling is not enabled.")
        return int(priority)


def _as_message(item: object) -> Mapping[str, Any]:
    if not isinstance(item, Mapping):
        raise BadRequest("each input item must be an object")
    if "role" in item:
        return item
    # function calls, their outputs and other typed items: their JSON is the text
    return {"role": "tool", "content": orjson.dumps(item).decode()}


def _include_usage(options: object, stream: bool) -> bool:
    if options is None:
        return False
    if not stream:
        raise BadRequest("Stream options can only be defined when `stream=True`.")
    if not isinstance(options, Mapping):
        raise BadRequest("stream_options must be an object")
    return bool(options.get("include_usage", False))


def _continuous_usage(options: object) -> bool:
    return isinstance(options, Mapping) and options.get("continuous_usage_stats") is True


def _salt(body: Mapping[str, Any]) -> str | None:
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise BadRequest("Parameter 'cache_salt' must be a non-empty string if provided.")
    return salt


def _first_int(body: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = body.get(key)
        if value is None:
            continue
        if not _is_int(value):
            raise BadRequest(f"{key} must be an integer")
        return int(value)
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: object) -> bool:
    return _is_int(value) and value >= 0  # type: ignore[operator]
