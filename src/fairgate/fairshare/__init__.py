"""Fair share: reservation with borrowing, mapped onto the engine's priority scheduler.

Pure: no I/O, no event loop; time, counts and usage are handed in.

Per pool of capacity C (concurrent requests it sustains without preemption):

    reservation(org) = Hamilton apportionment of C over the shares      apportion.py
    within share  ⇔  within-share requests in flight < reservation(org)
        priority = class                         (0 interactive, 1 batch)
    otherwise it borrows:
        priority = 10 + 10 · rank + class        (rank 0..9)                   priority.py
    rank = dense rank of LF = S / U, largest first (Slurm Fair Tree)           tree.py
    team sub-shares: R split over teams, in-org borrowing at 2/3, two-level rank  teams.py
    U from usage(t) = Σ cost · exp(−ln 2 · (t − t_finish) / half_life)        decay.py

Worked example: C = 10, shares A 0.8125 / B 0.1875 → reservations 8 / 2.
B has 2 within-share requests in flight, A none; usage A 90, B 10 (GPU-hours):
S = 0.8125 / 0.1875, U = 0.9 / 0.1, LF = 0.903 / 1.875, so B ranks 0 and A 1.
A's next request gets priority 0 (within share, 0 < 8); B's next interactive
request borrows with 10 + 10·0 + 0 = 10; had A been at 8 within share, its next
would borrow with 10 + 10·1 + 0 = 20.
"""

from __future__ import annotations

from fairgate.fairshare.apportion import apportion
from fairgate.fairshare.decay import DEFAULT_HALF_LIFE, DecayedUsage, decay
from fairgate.fairshare.policy import FairShare, Standing, TeamStanding
from fairgate.fairshare.priority import (
    BORROW_BASE,
    IN_ORG_BASE,
    RANK_STEP,
    Decision,
    PriorityClass,
    borrowing_priority,
    decide,
    decide_in_org,
)
from fairgate.fairshare.teams import REST, fair_tree_ranks, group_levels, split
from fairgate.fairshare.tree import MAX_RANK, dense_ranks, level_fairshare

__all__ = [
    "BORROW_BASE",
    "DEFAULT_HALF_LIFE",
    "IN_ORG_BASE",
    "MAX_RANK",
    "RANK_STEP",
    "REST",
    "DecayedUsage",
    "Decision",
    "FairShare",
    "PriorityClass",
    "Standing",
    "TeamStanding",
    "apportion",
    "borrowing_priority",
    "decay",
    "decide",
    "decide_in_org",
    "dense_ranks",
    "fair_tree_ranks",
    "group_levels",
    "level_fairshare",
    "split",
]
