"""Fair share: reservation with borrowing, mapped onto the engine's priority scheduler.

Pure: no I/O, no event loop; time, counts and usage are handed in.

Per pool of capacity C (concurrent requests it sustains without preemption):

    reservation(org) = Hamilton apportionment of C over the shares      apportion.py
    within share  ⇔  within-share requests in flight < reservation(org)
        priority = class                         (0 interactive, 1 batch)
    otherwise it borrows:
        priority = 10 + 10 · rank + class        (rank 0..9)                   priority.py
    rank = dense rank of LF = S / U, largest first (Slurm Fair Tree)           tree.py
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
from fairgate.fairshare.policy import FairShare, Standing
from fairgate.fairshare.priority import (
    BORROW_BASE,
    RANK_STEP,
    Decision,
    PriorityClass,
    borrowing_priority,
    decide,
)
from fairgate.fairshare.tree import MAX_RANK, dense_ranks, level_fairshare

__all__ = [
    "BORROW_BASE",
    "DEFAULT_HALF_LIFE",
    "MAX_RANK",
    "RANK_STEP",
    "DecayedUsage",
    "Decision",
    "FairShare",
    "PriorityClass",
    "Standing",
    "apportion",
    "borrowing_priority",
    "decay",
    "decide",
    "dense_ranks",
    "level_fairshare",
]
