"""The accounting record of a finished request, built from its Exchange.

Every authenticated request gets one, whatever its outcome: a request that used
a GPU and then failed still used it. A request refused before its key was known
(no principal) has nobody to charge and is left to the metrics and the log.

Before each attempt reaches an engine, ``intend`` journals a write-ahead entry: the
record the request would get if the gateway process died there and then (outcome
``interrupted``, charged the reservation; ``accounting.journal``). The request's own
record retires it. A process killed mid-request thereby leaves what it owes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from fairgate.accounting import UsageRecord
from fairgate.core.money import Money
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.usage import Usage

__all__ = ["RecordBuilder"]

_NO_USAGE = Usage()


class RecordBuilder:
    """Turns finished exchanges into usage records and hands them to ``record``.

    ``record`` is the recorder's non-blocking ``record()``; ``pools`` is per canonical
    model name, built once from the configuration. The cost is the exchange's, computed
    once when it was settled (``proxy.settle``), as the limits and budgets were charged.
    ``intend`` journals a write-ahead entry and retires the one it replaces, returning
    the entry's journal segment (None: not journaled); ``retire`` retires one (both the
    recorder's). Without them no entry is written.
    """

    def __init__(
        self,
        record: Callable[[UsageRecord], bool],
        pools: Mapping[str, str | None],
        *,
        intend: Callable[[tuple[object, ...], int | None], int | None] | None = None,
        retire: Callable[[int], None] | None = None,
    ) -> None:
        self._record = record
        self._pools = pools
        self._intend = intend
        self._retire = retire

    def __call__(self, ex: Exchange) -> None:
        principal = ex.principal
        if principal is None:
            return
        usage = ex.usage or _NO_USAGE
        finished = ex.finished or ex.started
        status = ex.status or (499 if ex.outcome == Outcome.CLIENT_ABORT else 0)
        self._record(
            UsageRecord(
                request_id=ex.request_id,
                at=datetime.now(UTC),
                key_id=principal.key_id,
                org=principal.org,
                team=principal.team,
                project=principal.project,
                tags=principal.tags if ex.tags is None else ex.tags,
                model=ex.model,
                pool=self._pools.get(ex.model),
                replica=ex.replica,
                route=ex.endpoint,
                status=status,
                outcome=ex.outcome,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cached_tokens=usage.cached_tokens,
                cost_micro=ex.cost.micro,
                estimated=usage.estimated,
                ttft_ms=(
                    round((ex.first_byte_at - ex.started) * 1000)
                    if ex.first_byte_at is not None and ex.replica
                    else None
                ),
                total_ms=round((finished - ex.started) * 1000),
                attempts=ex.attempts,
                client_addr=ex.client,
                other_costs=() if ex.costs is None else self._others(ex.model, ex.costs),
            )
        )
        intent = ex.intent
        if intent is not None and self._retire is not None:
            ex.intent = None
            self._retire(intent)

    def _others(
        self, model: str, costs: Mapping[str, Money]
    ) -> tuple[tuple[str, str | None, int], ...]:
        """The parts of ``costs`` (per model) charged to models other than ``model``, as a
        record's ``other_costs``; nothing for a part that cost nothing."""
        return tuple(
            [(m, self._pools.get(m), c.micro) for m, c in costs.items() if m != model and c.micro]
        )

    def intend(
        self,
        ex: Exchange,
        model: str,
        replica: str,
        usage: Usage,
        cost: Money,
        costs: Mapping[str, Money] | None = None,
    ) -> None:
        """Journal what ``ex`` owes if the process dies before it ends: ``usage`` (its
        reservation) at ``cost``, served by ``model`` on ``replica``, ``costs`` its split
        per model when earlier attempts on other models went unanswered. The entry is the
        values of ``accounting.journal.ENTRY_FIELDS``, in their order (the last,
        ``other_costs``, only when there are any: an entry without it reads as before)."""
        principal = ex.principal
        if principal is None or self._intend is None:
            return
        entry: tuple[object, ...] = (
            ex.request_id,
            time.time(),
            principal.key_id,
            principal.org,
            principal.team,
            principal.project,
            principal.tags if ex.tags is None else ex.tags,
            model,
            self._pools.get(model),
            replica,
            ex.endpoint,
            usage.prompt_tokens,
            usage.completion_tokens,
            cost.micro,
            round((time.monotonic() - ex.started) * 1000),
            ex.attempts,
            ex.client,
        )
        if costs is not None and (others := self._others(model, costs)):
            entry += (others,)
        ex.intent = self._intend(entry, ex.intent)
