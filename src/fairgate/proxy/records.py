"""The accounting record of a finished request, built from its Exchange.

Every authenticated request gets one, whatever its outcome: a request that used
a GPU and then failed still used it. A request refused before its key was known
(no principal) has nobody to charge and is left to the metrics and the log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from fairgate.accounting import UsageRecord
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.usage import Usage

__all__ = ["RecordBuilder"]

_NO_USAGE = Usage()


class RecordBuilder:
    """Turns finished exchanges into usage records and hands them to ``record``.

    ``record`` is the recorder's non-blocking ``record()``; ``pools`` is per canonical
    model name, built once from the configuration. The cost is the exchange's, computed
    once when it was settled (``proxy.settle``), as the limits and budgets were charged.
    """

    def __init__(
        self,
        record: Callable[[UsageRecord], bool],
        pools: Mapping[str, str | None],
    ) -> None:
        self._record = record
        self._pools = pools

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
            )
        )
