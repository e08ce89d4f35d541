"""Spend recorded in the store, put back into the budget counters at start-up.

The budget counters live in the state back end; with the memory back end they
die with the process. Before serving, the gateway raises every budget's counter
for the current period to what the store's usage records say was spent in it,
so that a restart never hands out a fresh allowance. ``seed`` never lowers a
counter, so doing this on several gateways sharing one Redis, or twice, is
harmless. A budget created in the middle of a period reaches each gateway at its
own refresh, and a gateway serves its scope uncharged until then: a gateway that
was already running when it sees a budget adds the spend recorded since the
previous seed (``CounterStore.seed``, ``uncharged``) rather than raising the
counter to the total, which would drop that spend whenever the counter holds
reservations the records do not show yet. Records a killed process (kill -9)
had not written yet are missing from this, as from the reports, until a process
starts again on its journal and writes them (``fairgate.accounting.journal``):
the gateway does that before it restores budgets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

from fairgate.core.money import Money
from fairgate.limits import Budget, Calendar, Limiter
from fairgate.limits.subject import OWNED_TAG_PREFIXES
from fairgate.store import Store, usage_records

__all__ = ["restore_spend", "spent_in_period"]

log = logging.getLogger(__name__)


def _filters(budget: Budget) -> dict[str, str]:
    if budget.scope_kind == "project":
        team, _, project = budget.scope.partition("/")
        wanted = {"team": team, "project": project}
    elif budget.scope_kind == "tag" and budget.scope.startswith(OWNED_TAG_PREFIXES):
        # an owned tag (``org:ORG/TAG``, ``team:TEAM/TAG``) spent only its owner's records
        owner, _, tag = budget.scope.partition("/")
        level, _, name = owner.partition(":")
        wanted = {level: name, "tag": tag}
    else:
        wanted = {budget.scope_kind: budget.scope}
    if budget.model is not None:
        wanted["model"] = budget.model
    return wanted


async def spent_in_period(store: Store, budget: Budget, now: float) -> Money:
    """What the records say ``budget``'s scope spent in its period holding ``now``."""
    span = Calendar(UTC).span(budget.period, now)
    async with store.read() as conn:
        (row,) = await usage_records.spend(
            conn,
            start=datetime.fromtimestamp(span.start, UTC),
            end=datetime.fromtimestamp(span.end, UTC),
            filters=_filters(budget),
        )
    return Money(row.cost_micro)


async def restore_spend(
    store: Store,
    limiter: Limiter,
    budgets: Iterable[Budget],
    now: float,
    *,
    track: float = 0.0,
    uncharged: bool = False,
) -> int:
    """Seed each budget's current counter with its recorded spend; returns how many had
    spent anything. ``track`` and ``uncharged`` as in ``CounterStore.seed``: with
    ``track``, a budget that spent nothing is seeded too, so that the back end keeps
    what its counter started from. Raises ``StoreUnavailable`` or ``StateUnavailable``."""
    raised = 0
    for budget in budgets:
        spent = await spent_in_period(store, budget, now)
        if spent.micro > 0 or track > 0:
            await limiter.restore(budget, spent, now, track=track, uncharged=uncharged)
        raised += spent.micro > 0
    return raised
