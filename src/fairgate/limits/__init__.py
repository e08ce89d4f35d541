"""Rate limits and budgets: one atomic check-and-charge per request over a ``CounterStore``.

A request of key ``k`` charges, all at once or not at all:

    rpm:k       sliding 60 s window, weight 1                  ≤ rpm
    tpm:k       sliding 60 s window, weight = estimated tokens ≤ tpm
    rpd:k:day   calendar day in the limiter's zone, 1          ≤ rpd
    inflight:k  one slot until settled                         ≤ max_in_flight
    budget:…    every budget it falls under, estimated cost    admitted while spent < cap

and when it ends, ``settle`` gives the slot back and replaces the estimates by
the real tokens and cost, in the window buckets and calendar periods the
reservation was charged in. Worked example: rpm = 10, ten requests at
t = 59.5 s; an eleventh at t = 61 s is refused with Retry-After 59 s (the burst
still counts until t = 120 s), so no 60 s interval ever holds more than ten
(``fairgate.limits.window`` has the proof).

Errors raised here (``fairgate.core.errors``) and by the stores::

    GatewayError
    ├── RateLimited          429  a limit (with Retry-After) or a spent budget (without)
    └── ServiceUnavailable   503  the state back end is down and the limiter fails closed
    StateUnavailable              raised by a CounterStore; never leaves the limiter
"""

from fairgate.core.limits import Limits
from fairgate.limits.budgets import Budget, BudgetBook, Increase
from fairgate.limits.charges import (
    Charge,
    InFlightCharge,
    Lease,
    MarkCharge,
    PeriodCharge,
    Verdict,
    WindowCharge,
)
from fairgate.limits.demand import Admission, Demand
from fairgate.limits.estimate import BYTES_PER_TOKEN, estimate_tokens, prompt_tokens
from fairgate.limits.fairshare_state import Claim, FairShareState
from fairgate.limits.limiter import Limiter, Outage
from fairgate.limits.periods import Calendar, PeriodKind, PeriodSpan
from fairgate.limits.refresher import LeaseRefresher
from fairgate.limits.store import CounterStore, StateUnavailable
from fairgate.limits.subject import ScopeKind, Subject
from fairgate.limits.usage import BudgetUsage, Usage
from fairgate.limits.window import SlidingWindow

__all__ = [
    "BYTES_PER_TOKEN",
    "Admission",
    "Budget",
    "BudgetBook",
    "BudgetUsage",
    "Calendar",
    "Charge",
    "Claim",
    "CounterStore",
    "Demand",
    "FairShareState",
    "InFlightCharge",
    "Increase",
    "Lease",
    "LeaseRefresher",
    "Limiter",
    "Limits",
    "MarkCharge",
    "Outage",
    "PeriodCharge",
    "PeriodKind",
    "PeriodSpan",
    "ScopeKind",
    "SlidingWindow",
    "StateUnavailable",
    "Subject",
    "Usage",
    "Verdict",
    "WindowCharge",
    "estimate_tokens",
    "prompt_tokens",
]
