"""The request fields a client may send to each engine kind, and how large they may be.

Some fields of an engine's request are not for tenants: they change how the
engine itself behaves (a chat template it compiles, a KV slot it pins, tensors
it loads as embeddings), and a few were denial-of-service or memory-corruption
holes (CVE-2025-61620 ``chat_template``/``chat_template_kwargs``, CVE-2025-62164
``prompt_embeds``). Others are fine within bounds: sampling counts and the
structured-output fields the engine compiles into grammars.

A ``RequestPolicy`` holds three rules, checked once per request on the body as
the engine will read it (the parsed JSON object, and the object under
``extra_body``; for multipart bodies the form fields):

    deny       the field may not appear                   → 400 field_not_allowed
    caps       a number the field may not exceed          → 400 field_too_large
    max_bytes  the field's size in bytes                 → 400 field_too_large
               (a string's UTF-8 bytes, any other value's JSON encoding)

A refused body is refused, never rewritten: byte-exact kinds stay byte-exact.

Spelling. The check reads the parsed body, so every spelling the engine decodes
to the same key is caught: ``"chat\\u005ftemplate"`` is ``chat_template`` after
the parse. Duplicate keys: orjson keeps the last, and so do both engines (vLLM's
pydantic models get a dict; llama-server's nlohmann::json assigns each key in
turn), so a denied key present in any occurrence is present in the parsed dict,
and a capped key's checked value is the one the engine uses. Case: both engines
look keys up exactly (pydantic field names, ``json_value(body, "id_slot", …)``),
so ``ID_SLOT`` is a different field the engine ignores and is not refused.
A numeric cap also applies to a number written as a string (``"n": "100"``):
pydantic's lax mode would read it as 100. A cap refuses negative numbers too:
vLLM takes ``top_logprobs``/``prompt_logprobs`` -1 for the whole vocabulary.

    >>> policy = VLLM_POLICY.merged(allow=("chat_template",), caps={"n": 2})
    >>> policy.check({"n": 3})
    Traceback (most recent call last):
    ...
    fairgate.engines.policy.FieldRefused: 'n' must be at most 2
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from fairgate.core.errors import BadRequest
from fairgate.engines.form import Form

__all__ = [
    "DEFAULT_MAX_BYTES",
    "LLAMA_SERVER_POLICY",
    "OPENAI_POLICY",
    "VLLM_POLICY",
    "FieldRefused",
    "RequestPolicy",
    "policy_for",
]

DEFAULT_MAX_BYTES = 64 * 1024
"""The default bound of a structured field (a grammar, schema or tool list): 64 KiB
is about a thousand lines of JSON schema, more than hand-written tools need, and
small enough that compiling it costs the engine milliseconds, not minutes."""

_LOGPROBS_CAP = 20
"""The largest logprob count: OpenAI's own limit and vLLM's default ``max_logprobs``;
an engine started with a larger one (or -1, the whole vocabulary) is not exposed."""

_EXTRA_BODY = "extra_body"


class FieldRefused(BadRequest):
    """A field the model's policy refuses; ``field`` names it (a name from the policy)."""

    def __init__(self, message: str, *, code: str, field: str) -> None:
        super().__init__(message, code=code)
        self.field = field


def _frozen(mapping: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    """The fields one model refuses or bounds (see the module text). Immutable; built
    at load time, shared by every request."""

    deny: frozenset[str] = frozenset()
    caps: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    max_bytes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    names: frozenset[str] = field(init=False, repr=False, compare=False)
    """Every field a rule names: a body (or ``extra_body``) holding none of them passes."""
    fields: frozenset[str] = field(init=False, repr=False, compare=False)
    """Every top-level key ``check`` reads (``names`` and ``extra_body``): a body holding
    none of them passes, so a chain of policies can skip them all with one look."""

    def __post_init__(self) -> None:
        names = self.deny | self.caps.keys() | self.max_bytes.keys()
        object.__setattr__(self, "names", frozenset(names))
        object.__setattr__(self, "fields", frozenset((*names, _EXTRA_BODY)))

    def merged(
        self,
        *,
        deny: Iterable[str] = (),
        allow: Iterable[str] = (),
        caps: Mapping[str, int] | None = None,
        max_bytes: Mapping[str, int] | None = None,
    ) -> RequestPolicy:
        """This policy with an operator's override: ``deny`` extends the denied fields,
        ``allow`` lifts a denial (and a cap or bound on the same field), ``caps`` and
        ``max_bytes`` replace the value of each field they name."""
        lifted = frozenset(allow)
        return RequestPolicy(
            deny=(self.deny - lifted) | frozenset(deny),
            caps=_frozen(
                {k: v for k, v in self.caps.items() if k not in lifted} | dict(caps or {})
            ),
            max_bytes=_frozen(
                {k: v for k, v in self.max_bytes.items() if k not in lifted} | dict(max_bytes or {})
            ),
        )

    def check(self, body: Mapping[str, Any]) -> None:
        """Refuse a JSON body breaking the policy: ``FieldRefused`` (400) naming the field."""
        self._check_object(body)
        if _EXTRA_BODY in body:
            nested = body[_EXTRA_BODY]
            if isinstance(nested, dict):
                # SDKs flatten extra_body; a client writing it on the wire still means the
                # fields inside, and a pass-through engine may read them.
                self._check_object(nested)

    def check_form(self, form: Form) -> None:
        """Refuse a multipart form breaking the policy; text fields are read as the
        engine's form parser reads them (strings), so a numeric cap parses them."""
        for part in form.parts:
            name = part.name
            if name in self.deny:
                raise _not_allowed(name)
            cap = self.caps.get(name)
            if cap is not None and not part.is_file:
                _check_number(name, part.data.decode("utf-8", "replace"), cap)
            limit = self.max_bytes.get(name)
            if limit is not None and len(part.data) > limit:
                raise _too_large_bytes(name, limit)

    def _check_object(self, body: Mapping[str, Any]) -> None:
        if self.names.isdisjoint(body):
            return  # the common body: no field any rule names
        for name in self.deny:
            if name in body:
                raise _not_allowed(name)
        for name, cap in self.caps.items():
            value = body.get(name)
            if value is not None:
                _check_number(name, value, cap)
        for name, limit in self.max_bytes.items():
            value = body.get(name)
            if value is not None and _size(value) > limit:
                raise _too_large_bytes(name, limit)


def _size(value: Any) -> int:
    """A string's UTF-8 bytes (what the engine compiles), anything else its JSON encoding."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    return len(orjson.dumps(value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None  # not a number at all: the engine refuses it
    return None


def _check_number(name: str, value: Any, cap: int) -> None:
    number = _number(value)
    if number is None:
        return
    if number < 0:
        # a capped field counts something, and vLLM reads a logprob count of -1 as
        # "every token of the vocabulary": a negative number is no smaller than the cap
        raise FieldRefused(
            f"'{name}' must be between 0 and {cap}", code="field_too_large", field=name
        )
    if math.isnan(number) or number > cap:
        raise FieldRefused(f"'{name}' must be at most {cap}", code="field_too_large", field=name)


def _not_allowed(name: str) -> FieldRefused:
    return FieldRefused(
        f"'{name}' is not allowed for this model", code="field_not_allowed", field=name
    )


def _too_large_bytes(name: str, limit: int) -> FieldRefused:
    return FieldRefused(
        f"'{name}' is larger than {limit} bytes", code="field_too_large", field=name
    )


def _bounded(*names: str) -> Mapping[str, int]:
    return _frozen(dict.fromkeys(names, DEFAULT_MAX_BYTES))


VLLM_POLICY = RequestPolicy(
    # background: a Responses API request answered "queued" at once while the engine
    # generates on, outside the gateway's admission and fair share, for an answer only
    # GET /v1/responses/{id} would return, a route the gateway never serves
    deny=frozenset(
        {
            "chat_template",
            "chat_template_kwargs",
            "prompt_embeds",
            "mm_processor_kwargs",
            "background",
        }
    ),
    caps=_frozen(dict.fromkeys(("logprobs", "top_logprobs", "prompt_logprobs"), _LOGPROBS_CAP)),
    max_bytes=_bounded(
        "tools",
        "response_format",
        "structured_outputs",
        "guided_json",
        "guided_regex",
        "guided_choice",
        "guided_grammar",
        "text",
    ),
)
"""vLLM: templates, raw tensors and background responses denied, logprob counts capped,
grammar sources bounded.
``n`` and ``best_of`` are capped for every kind by ``limits.max_n``."""

LLAMA_SERVER_POLICY = RequestPolicy(
    # id_slot pins (and with cache_prompt reuses) another request's KV slot; lora swaps
    # adapters for the whole server; samplers and t_max_predict_ms steer its scheduler.
    deny=frozenset({"id_slot", "lora", "samplers", "t_max_predict_ms"}),
    caps=_frozen({"n_probs": _LOGPROBS_CAP, "top_logprobs": _LOGPROBS_CAP}),
    max_bytes=_bounded("grammar", "json_schema", "response_format", "tools"),
)
"""llama-server: slot, adapter and sampler control denied, ``n_probs`` capped, grammars
bounded. ``n_predict`` is the output cap of every generating route (``engines.output``)."""

OPENAI_POLICY = RequestPolicy(
    # background: as on vLLM (a vLLM or OpenAI's own API may be declared this kind)
    deny=frozenset({"background"}),
    caps=_frozen({"top_logprobs": _LOGPROBS_CAP}),
    max_bytes=_bounded("tools", "response_format", "text"),
)
"""A generic OpenAI-compatible server: background responses denied, the structured
fields bounded."""

_BY_KIND: Mapping[str, RequestPolicy] = MappingProxyType(
    {"vllm": VLLM_POLICY, "llama-server": LLAMA_SERVER_POLICY, "openai": OPENAI_POLICY}
)


def policy_for(kind: str) -> RequestPolicy:
    """The default policy of engine ``kind``; ``ValueError`` for an unknown kind."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"unknown engine kind {kind!r}") from None
