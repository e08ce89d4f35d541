"""Level fairshare and ranks among the organisations of a pool (Slurm's Fair Tree, one level).

    S = share / Σ shares          (normalised over the pool's organisations)
    U = usage / Σ usage           (decayed usage, normalised the same way)
    LF = S / U                    (+inf when the organisation has no usage)

The organisation with the largest LF is the most under-served and gets rank 0;
equal LF share a rank (dense ranking: 0, 1, 1, 2), and ranks stop at
``MAX_RANK`` (9) so a borrowing priority stays below 110. Worked example, shares
0.75 / 0.25 and usage 30 / 10 / 0 for A, B, C:

    S = 0.75, 0.25, 0      U = 0.75, 0.25, 0      LF = 1.0, 1.0, +inf
    ranks: C 0, A 1, B 1

Ranking instead of using LF as a number follows Fair Tree: precision loss in
tiny or huge ratios cannot reorder organisations, and ties are exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["MAX_RANK", "dense_ranks", "level_fairshare"]

MAX_RANK = 9
"""The largest rank: the tenth and every later distinct LF value share it."""


def level_fairshare(shares: Mapping[str, float], usage: Mapping[str, float]) -> dict[str, float]:
    """LF = S / U for every organisation named in ``shares`` or ``usage``.

    A name missing from one mapping counts as share 0 or usage 0. No usage gives
    ``math.inf`` (also when nobody has used the pool yet); a share of 0 with
    usage gives 0.0. Raises ``ValueError`` for a negative or non-finite share or
    usage.
    """
    names = dict.fromkeys([*shares, *usage])
    share_of = {org: _checked("share", org, shares.get(org, 0.0)) for org in names}
    usage_of = {org: _checked("usage", org, usage.get(org, 0.0)) for org in names}
    share_total = sum(share_of.values())
    usage_total = sum(usage_of.values())
    levels: dict[str, float] = {}
    for org in names:
        if usage_of[org] == 0:
            levels[org] = math.inf
            continue
        s = share_of[org] / share_total if share_total > 0 else 0.0
        fraction = usage_of[org] / usage_total
        # a usage too small to be a fraction of the total (underflow) counts as none
        levels[org] = s / fraction if fraction > 0 else math.inf
    return levels


def dense_ranks(levels: Mapping[str, float]) -> dict[str, int]:
    """Dense rank of each LF value, largest first (rank 0), capped at ``MAX_RANK``.

    Raises ``ValueError`` for a NaN level.
    """
    if any(math.isnan(lf) for lf in levels.values()):
        raise ValueError("a level fairshare is NaN")
    order = {
        lf: min(i, MAX_RANK) for i, lf in enumerate(sorted(set(levels.values()), reverse=True))
    }
    return {org: order[lf] for org, lf in levels.items()}


def _checked(what: str, org: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} of {org!r} must be finite and non-negative, got {value!r}")
    return float(value)
