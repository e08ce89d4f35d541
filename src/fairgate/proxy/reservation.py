"""What a request may consume, decided before it is admitted, and what it is charged after.

The rule: **a request's reservation is an upper bound of the output it can make
an engine generate, and when the real usage is unknown the request is charged
its reservation (flagged estimated), never a lower guess.**

    reservation.prompt     = ceil(body bytes / 4)
    reservation.completion = prompts × max(n, best_of) × cap      (engines.output)

``reserve`` computes it for every model of the request's chain (the model, then
its fallbacks): a fallback that cannot bound the request (a byte-exact engine
without a cap field in the body) is left out of the chain; the model asked for
refuses the request with 400 instead. The reservation charged by the limits
is the largest of the chain's, so whichever model serves, it is a bound.

``charge`` runs when the request ends, before the limits settle and the usage
record is built: an answer without a usage report, a stream cut off before its
report (a running count on its token events, vLLM's ``continuous_usage_stats``, is
not one: the engine may have generated more than it counted to the gateway so far; nor
are the counts of the sequences of a llama-server batch that ended before the others),
every earlier attempt that reached an engine and got no answer (a timeout, a broken
connection) and an attempt the client left before the engine answered are charged the
reservation. An engine's refusal made before it generated anything is charged
nothing: a stream's answer of status 400 to 499 (an engine sends a stream's status
before its first token, so a 4xx there means no token was made), and a plain
answer of 401 to 499 (routing, size, authentication and schema checks, all before
any generation). A plain 400 keeps the reservation: vLLM also answers 400 to an
error raised after generating (a tool call cut off by its cap that fails to parse).

``Reservation`` itself is defined in ``proxy.exchange``, beside the ``Exchange`` that
holds it (so neither module imports the other both ways), and exported here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fairgate.core.errors import BadRequest
from fairgate.engines.output import bound
from fairgate.limits.estimate import prompt_tokens
from fairgate.proxy.endpoints import ModelEntry
from fairgate.proxy.exchange import Exchange, Outcome, Reservation
from fairgate.proxy.usage import Usage

__all__ = ["OutputPolicy", "Reservation", "charge"]

_REFUSED = Usage()


@dataclass(frozen=True, slots=True)
class OutputPolicy:
    """The operator's output bounds, built once from the configuration.

    ``ceilings`` maps a canonical model to the largest cap a request may ask for
    (``models[].max_tokens`` and ``limits.max_tokens``, the smaller; absent: no
    ceiling); ``default`` is the cap a re-encoded body gets when it sets none (never
    above the model's ceiling); ``assumed`` is the output an endpoint without any
    cap field is assumed to generate; ``max_prompts`` bounds a batch of prompts.
    """

    ceilings: Mapping[str, int | None]
    default: int
    assumed: int
    max_prompts: int

    def reserve(self, ex: Exchange, entry: ModelEntry) -> ModelEntry:
        """Set ``ex.reservation`` and ``ex.output_caps``; return the chain of the models
        that can bound the request. ``BadRequest`` (400) when the model asked for cannot."""
        body = ex.parsed if ex.parsed is not None else {}
        prompt = prompt_tokens(ex.prompt_bytes)
        completion = 0
        kept = []
        for position, candidate in enumerate(entry.chain):
            kind = candidate.endpoint_kind(ex.endpoint)
            assert kind is not None  # the chain holds only models serving the endpoint
            ceiling = self.ceilings.get(candidate.name)
            default = self.default if ceiling is None else min(self.default, ceiling)
            try:
                limit = bound(
                    body,
                    kind.output,
                    ceiling=ceiling,
                    default=default,
                    writable=candidate.adapter.rewrites_body and ex.parsed is not None,
                    max_prompts=self.max_prompts,
                )
            except BadRequest:
                if position == 0:
                    raise
                continue  # a fallback that cannot bound this request never serves it
            kept.append(candidate)
            ex.output_caps[candidate.name] = limit.cap
            ex.sequences = max(ex.sequences, limit.sequences)
            completion = max(completion, limit.tokens(self.assumed))
        ex.reservation = Reservation(prompt, completion)
        ex.chain = tuple(c.name for c in kept)
        return entry if len(kept) == len(entry.chain) else ModelEntry(tuple(kept))


def charge(ex: Exchange) -> Usage | None:
    """Make ``ex.usage`` what the request is charged (see the module text); None when
    nothing reached an engine. Returns the served attempt's part of it (None: no attempt
    was answered), which is priced at the served model's prices and each unanswered
    attempt's reservation at its own model's (``proxy.settle``)."""
    reservation = ex.reservation
    if reservation is None:
        return None
    if (
        ex.replica
        and ex.usage is None
        and ex.outcome == Outcome.OK
        and (401 <= ex.status < 500 or (ex.status == 400 and ex.stream))
    ):
        ex.usage = _REFUSED  # the engine's own refusal before generating, relayed
    elif ex.replica and (ex.usage is None or ex.usage_gap or (ex.usage_so_far and not ex.ending)):
        # no report, a report short of a sequence, or a count so far cut off before the
        # stream's end: the reservation
        ex.usage = reservation.usage()
    served = ex.usage
    if ex.unanswered:
        lost = reservation.usage(len(ex.unanswered))
        ex.usage = lost if served is None else served.plus(lost)
    return served
