"""A lease: admission's permission for one request, from grant to release.

    granted ──dispatched()──▶ dispatched ──release()──▶ released
       └────────────────────release()───────────────────▲

While *granted*, the request counts as pending in its pool's saturation (no
replica has seen it yet, so no in-flight count includes it). ``dispatched()``
hands it over to the replica's in-flight count; ``release()`` ends it and lets
the controller admit waiters. Both are idempotent, so a ``finally`` may call
``release()`` whatever happened before.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from fairgate.admission.bands import Band

__all__ = ["Lease"]

_GRANTED, _DISPATCHED, _RELEASED = 0, 1, 2


class _Owner(Protocol):
    def _lease_dispatched(self, lease: Lease) -> None: ...

    def _lease_released(self, lease: Lease, *, was_pending: bool) -> None: ...


class Lease:
    """One admitted request: its ``band``, ``tenant``, fair-share ``priority``, ``cost``
    (its weight in the pending count, >= 1) and ``waited`` (seconds in the queue, 0.0 if
    admitted at once).

    Call ``dispatched()`` as soon as the replica's in-flight count includes the
    request (no ``await`` in between), and ``release()`` once the request is
    over and the in-flight count no longer includes it, whatever the outcome.
    A lease never released keeps its pool a little fuller for good. Usable as
    a context manager that releases on exit.
    """

    __slots__ = ("_owner", "_state", "band", "cost", "priority", "tenant", "waited")

    def __init__(
        self, owner: _Owner, band: Band, tenant: str, priority: int, cost: int, waited: float
    ) -> None:
        self._owner = owner
        self._state = _GRANTED
        self.band = band
        self.tenant = tenant
        self.priority = priority
        self.cost = cost
        self.waited = waited

    @property
    def pending(self) -> bool:
        """True between the grant and ``dispatched()`` (or ``release()``)."""
        return self._state == _GRANTED

    @property
    def released(self) -> bool:
        return self._state == _RELEASED

    def dispatched(self) -> None:
        """The request reached a replica: stop counting it as pending. Idempotent."""
        if self._state == _GRANTED:
            self._state = _DISPATCHED
            self._owner._lease_dispatched(self)

    def release(self) -> None:
        """The request is over: give the lease back and wake waiters. Idempotent."""
        if self._state != _RELEASED:
            was_pending = self._state == _GRANTED
            self._state = _RELEASED
            self._owner._lease_released(self, was_pending=was_pending)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = ("granted", "dispatched", "released")[self._state]
        return f"Lease({self.band.name}, {self.tenant!r}, priority={self.priority}, {state})"
