"""A listener's guard: which store lookups of credentials may happen, and what each refusal counts.

Each listener (client, admin) has its own guard, so failures on one never
limit the other. A guard joins the listener's ``FailureLimiter`` and its
``LookupCeiling``; the listener's authenticator asks it before every store
lookup of a credential not known to be valid, and tells it how the lookup went:

    admit(addr)
      network within its limits, ceiling not reached      → Slot (look it up)
      network over its limits, ceiling under half used    → Slot (look it up)
      otherwise                                           → Refusal (429, no lookup)
    valid(slot)        the credential was valid: the slot is given back
    unavailable(slot)  the store did not answer: given back, no failure counted
    abandoned(slot)    the caller went away: given back
    invalid(addr, …)   refused: one failure counted; the wait, if already over its limits

So a valid credential is served whatever its network's failure count, as long
as its lookup can happen; what a spray can use up is the ceiling's share for
failing networks, never the whole of it, and a credential the listener already
knows to be valid is looked up without asking the guard at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fairgate.auth.ceiling import LookupCeiling, Slot
from fairgate.auth.failures import FailureLimiter
from fairgate.auth.shared_failures import SharedFailures

__all__ = ["AuthGuard", "AuthObserver", "Refusal"]

# Refusal reasons (the `reason` label of fairgate_auth_refusals_total).
MISSING = "missing_credential"
MALFORMED = "malformed"
INVALID = "invalid"
NETWORK_LIMIT = "network_limit"
LOOKUP_CEILING = "lookup_ceiling"
UNAVAILABLE = "store_unavailable"


class AuthObserver(Protocol):
    """Where a guard reports: ``refused(reason)`` per refused request, ``looked_up(outcome)``
    per store lookup made (``valid``, ``invalid``, ``unavailable``)."""

    def refused(self, reason: str) -> None: ...

    def looked_up(self, outcome: str) -> None: ...


class _Unobserved:
    def refused(self, reason: str) -> None:
        return None

    def looked_up(self, outcome: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """No lookup: ``reason`` is ``network_limit`` or ``lookup_ceiling``; retry after seconds."""

    reason: str
    retry_after: float


class AuthGuard:
    """The failure limits and the lookup ceiling of one listener (see the module docstring)."""

    def __init__(
        self,
        failures: FailureLimiter,
        ceiling: LookupCeiling,
        observer: AuthObserver | None = None,
        shared: SharedFailures | None = None,
    ) -> None:
        self._failures = failures
        self._shared = shared
        self._ceiling = ceiling
        self._observer: AuthObserver = observer if observer is not None else _Unobserved()

    def admit(self, addr: str) -> Slot | Refusal:
        """A slot for one store lookup from ``addr``, or why not and for how long."""
        over = self._failures.blocked(addr)
        taken = self._ceiling.take(restricted=over is not None)
        if isinstance(taken, Slot):
            return taken
        if over is None:
            refusal = Refusal(LOOKUP_CEILING, taken)
        else:  # it may try again when either its network or the ceiling's share frees up
            refusal = Refusal(NETWORK_LIMIT, min(over, taken))
        self._observer.refused(refusal.reason)
        return refusal

    def valid(self, slot: Slot | None) -> None:
        """The lookup found a valid credential (``slot`` None: one known valid, not admitted)."""
        if slot is not None:
            self._ceiling.give_back(slot)
        self._observer.looked_up("valid")

    def unavailable(self, slot: Slot | None) -> None:
        """The store did not answer: not the caller's failure."""
        if slot is not None:
            self._ceiling.give_back(slot)
        self._observer.looked_up("unavailable")
        self._observer.refused(UNAVAILABLE)

    def abandoned(self, slot: Slot | None) -> None:
        """The caller went away before the lookup ended."""
        if slot is not None:
            self._ceiling.give_back(slot)

    def invalid(self, addr: str, *, looked_up: bool) -> float | None:
        """Count a refused credential from ``addr`` (a slot it took stays used).

        Returns the seconds to wait when ``addr``'s network was already over
        its limits before this failure (the caller answers 429), else None
        (401): the failure that reaches the limit is still a 401.
        """
        if looked_up:
            self._observer.looked_up("invalid")
        self._observer.refused(INVALID)
        wait = self._failures.blocked(addr)
        self._failures.failed(addr)
        return wait

    async def failed(self, addr: str, *, looked_up: bool) -> float | None:
        """``invalid``, and with a shared count (``SharedFailures``) the failure counted
        across the fleet too: the seconds to wait when the fleet's count was already at a
        limit (the network is then held over its limits here as well)."""
        wait = self.invalid(addr, looked_up=looked_up)
        if self._shared is None:
            return wait
        shared = await self._shared.failed(addr)
        if shared is None:
            return wait
        self._failures.hold(addr, shared)
        return max(wait or 0.0, shared)

    def refused(self, reason: str) -> None:
        """Count a refusal that needed no lookup and is no failure (``missing_credential``,
        ``malformed``)."""
        self._observer.refused(reason)
