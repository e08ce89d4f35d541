"""How much output a request can make an engine generate, read from its body.

Every generating route has fields the engine reads as its output cap; the
gateway needs an upper bound of what a request can consume before it admits
it, so it reads those fields the way the engine does:

    sequences = prompts × max(n, best_of, n_cmpl)
    reserved output = sequences × cap

``prompts`` is the number of prompts in the batch fields (``/v1/completions``
takes a list of prompts and runs each one, and vLLM a list of prompt embeddings in
``prompt_embeds`` beside them), one otherwise. ``cap`` is the
engine's effective cap:

- an engine whose body the gateway re-encodes (vLLM) gets the cap written
  into every cap field of the route: the client's own value, else the
  model's default, never above the model's ceiling;
- a body relayed byte for byte cannot be given a cap, so it must carry an
  acceptable one in a field every version of the engine reads; the bound is the
  largest cap field present, whichever of them the engine prefers.

    >>> route = Output(("max_tokens",), prompts=("prompt",))
    >>> bound({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 10}, route,
    ...       ceiling=100, default=50, writable=True, max_prompts=16)
    Bound(sequences=6, cap=10)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairgate.core.errors import BadRequest

__all__ = ["MAX_CAP", "NO_OUTPUT", "UNCAPPED", "Bound", "Output", "bound", "count_prompts"]

MAX_CAP = 2**31 - 1
"""The largest output cap any request may ask for, ceiling or none: past any model's
context, and small enough that a reservation's cost (prompts × choices × cap × price)
stays far inside the state back end's 64-bit counters (a cap of 10**19 made Redis fail
the limits script, which counted toward the breaker every tenant shares)."""


@dataclass(frozen=True, slots=True)
class Output:
    """The output side of one route of one engine kind.

    ``fields``: the body fields the engine reads as its output cap, any of them
    (empty: no cap field). ``prompts``: the fields whose lists run one sequence per
    entry (their counts add up), if any. ``generates``: false on routes that produce no tokens
    (embeddings, rerank, tokenize): their reservation has no output part.
    ``honoured``: the fields of ``fields`` that every version of the engine reads (empty:
    all of them). A body relayed byte for byte must carry one of these: a field only
    some versions read bounds nothing on the others (llama-server reads
    ``max_completion_tokens`` only since early 2026), though its value, when larger,
    still raises the bound.
    """

    fields: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    generates: bool = True
    honoured: tuple[str, ...] = ()


NO_OUTPUT = Output(generates=False)
"""A route that produces no tokens (embeddings, pooling, rerank, tokenize)."""

UNCAPPED = Output()
"""A route that generates text with no cap field (audio transcription): its reservation
assumes the configured default completion."""


@dataclass(frozen=True, slots=True)
class Bound:
    """``sequences`` the engine will run and ``cap`` tokens at most each (None: no cap
    field, the caller assumes its default)."""

    sequences: int
    cap: int | None

    def tokens(self, assumed: int) -> int:
        """The reserved output tokens; ``assumed`` per sequence when there is no cap."""
        return self.sequences * (assumed if self.cap is None else self.cap)


def _positive(body: Mapping[str, Any], field: str) -> int:
    value = body.get(field)
    if value is None:
        return 1
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"'{field}' must be a positive integer", code="invalid_value")
    return value


def count_prompts(value: Any) -> int:
    """How many sequences a prompt field runs: a string or a list of token ids is one
    prompt, a list of strings or of token lists is one per entry."""
    if not isinstance(value, list) or not value:
        return 1
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return 1
    return len(value)


def _prompt_count(body: Mapping[str, Any], fields: tuple[str, ...]) -> int:
    """The prompts of every batch field present, added up; one when none is."""
    count = 0
    for field in fields:
        value = body.get(field)
        if value is not None:
            count += count_prompts(value)
    return count or 1


def _present(body: Mapping[str, Any], fields: tuple[str, ...], ceiling: int | None) -> list[int]:
    caps = []
    for field in fields:
        if field not in body:
            continue
        value = body[field]
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequest(f"'{field}' must be a non-negative integer", code="invalid_value")
        most = MAX_CAP if ceiling is None else min(ceiling, MAX_CAP)
        if value > most:
            raise BadRequest(f"'{field}' must be at most {most}", code="max_tokens_too_large")
        caps.append(value)
    return caps


def bound(
    body: Mapping[str, Any],
    output: Output,
    *,
    ceiling: int | None,
    default: int,
    writable: bool,
    max_prompts: int,
) -> Bound:
    """The bound of one request on one route (see the module text), or ``BadRequest``
    (400) naming the field: a cap above ``ceiling``, too many prompts, a relayed body
    without a cap, ``min_tokens`` above the cap.

    ``default`` is the cap a re-encoded body gets when the client set none
    (``writable``: the gateway writes the cap into the body).
    """
    if not output.generates:
        return Bound(0, 0)
    prompts = _prompt_count(body, output.prompts) if output.prompts else 1
    if prompts > max_prompts:
        raise BadRequest(
            f"{' and '.join(repr(f) for f in output.prompts if f in body)} may hold at most"
            f" {max_prompts} prompts, this one has {prompts}",
            code="too_many_prompts",
        )
    # llama-server reads n_cmpl before n; no other engine has it, so counting it costs
    # the others nothing a client does not ask for
    if "n" in body or "best_of" in body or "n_cmpl" in body:
        choices = max(_positive(body, "n"), _positive(body, "best_of"), _positive(body, "n_cmpl"))
    else:
        choices = 1  # the common body: one sequence per prompt
    sequences = prompts * choices
    if not output.fields:
        return Bound(sequences, None)
    present = _present(body, output.fields, ceiling)
    if writable:
        # The engine reads the first field present in its order of precedence; the
        # gateway writes that value (or the default) into every cap field.
        cap = present[0] if present else default
        if ceiling is not None:
            cap = min(cap, ceiling)
    elif present and (not output.honoured or any(body.get(f) is not None for f in output.honoured)):
        cap = max(present)  # whichever field the engine prefers, it is no larger
    else:
        names = " or ".join(f"'{f}'" for f in (output.honoured or output.fields))
        limit = f" (at most {ceiling})" if ceiling is not None else ""
        raise BadRequest(
            f"this model needs an output cap: set {names}{limit}", code="max_tokens_required"
        )
    if "min_tokens" in body:
        minimum = body["min_tokens"]
        if isinstance(minimum, int) and not isinstance(minimum, bool) and minimum > cap:
            raise BadRequest(f"'min_tokens' must be at most {cap}", code="invalid_value")
    return Bound(sequences, cap)
