"""What a request charges, what it gets back, and what it settles later.

A request is admitted by charging several counters in one atomic step; each
counter is described by one charge. The counter's identity is its ``key``
(unique within one acquisition); everything a later settle needs travels in the
``Lease``, so a correction lands where the reservation was made even if the day,
the month or the window has moved on since.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fairgate.limits.fairshare_state import Claim
from fairgate.limits.window import DEFAULT_GRANULES

__all__ = [
    "IN_FLIGHT_RETRY_AFTER",
    "Charge",
    "Charges",
    "InFlightCharge",
    "Layout",
    "Lease",
    "MarkCharge",
    "PeriodCharge",
    "Verdict",
    "WindowCharge",
    "check_distinct",
    "layout_of",
]

# Retry-After for a refused in-flight slot: nobody knows when one frees, so a short pause.
IN_FLIGHT_RETRY_AFTER = 1.0


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class WindowCharge:
    """Add ``amount`` to a sliding window of ``window`` seconds capped at ``limit``.

    Admitted when the window's counted weight plus ``amount`` stays ``<= limit``
    (see ``fairgate.limits.window`` for the algorithm and its guarantee).
    ``amount`` and ``limit`` are non-negative integers (requests, tokens).
    """

    key: str
    amount: int
    limit: int
    window: float = 60.0
    granules: int = DEFAULT_GRANULES


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class PeriodCharge:
    """Add ``amount`` to the counter of one calendar period (its label is in ``key``).

    Admitted when ``counter + amount <= limit``; with ``overdraft`` (budgets) when
    the counter is still below ``limit``, so the last admission may end above it
    by at most its own amount. ``resets_at`` (Unix seconds) is when the period
    ends, for Retry-After; the counter is kept until ``keep_until`` so that late
    corrections still find it, then forgotten.
    """

    key: str
    amount: int
    limit: int
    resets_at: float
    keep_until: float
    overdraft: bool = False


@dataclass(frozen=True, slots=True)
class InFlightCharge:
    """Hold one of ``limit`` concurrent slots until the lease is settled (or expires)."""

    key: str
    limit: int


@dataclass(frozen=True, slots=True)
class MarkCharge:
    """Admitted only while the counter ``key`` exists: a mark an earlier step left
    (``CounterStore.seed``). Charges nothing and settles nothing.

    The budgets' guard: a back end that lost its data (a Redis restarted without
    persistence) lost the mark with the budget counters, and a request is not
    admitted on those empty counters before the recorded spend is put back.
    """

    key: str


Charge = WindowCharge | PeriodCharge | InFlightCharge | MarkCharge


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each kind of charge sits in one acquisition's sequence, worked out once.

    ``windows`` holds, per window shape (length, granules), the positions of the window
    charges cut so; ``periods``, ``in_flight`` and ``marks`` the positions of the others.
    A store then walks typed lists instead of asking each charge its kind, and computes
    a window's current bucket once per shape. The charges' keys are distinct (checked when
    the layout is made).
    """

    windows: tuple[tuple[float, int, tuple[int, ...]], ...]
    periods: tuple[int, ...]
    in_flight: tuple[int, ...]
    marks: tuple[int, ...] = ()

    @classmethod
    def of(cls, charges: Sequence[Charge]) -> Layout:
        """The layout of ``charges``; ``ValueError`` unless their keys are distinct."""
        check_distinct(charges)
        shapes: dict[tuple[float, int], list[int]] = {}
        periods: list[int] = []
        in_flight: list[int] = []
        marks: list[int] = []
        for index, charge in enumerate(charges):
            if isinstance(charge, WindowCharge):
                shapes.setdefault((charge.window, charge.granules), []).append(index)
            elif isinstance(charge, PeriodCharge):
                periods.append(index)
            elif isinstance(charge, InFlightCharge):
                in_flight.append(index)
            else:
                marks.append(index)
        windows = tuple((length, granules, tuple(at)) for (length, granules), at in shapes.items())
        return cls(windows, tuple(periods), tuple(in_flight), tuple(marks))


class Charges(tuple[Charge, ...]):
    """A tuple of charges that carries its ``Layout``: what the planner hands a store.

    It is a tuple in every other respect (a store that does not read the layout, such
    as the Redis one, sees the charges in their order); ``layout`` must describe them.
    """

    layout: Layout

    def __new__(cls, charges: Iterable[Charge], layout: Layout) -> Charges:
        planned = super().__new__(cls, charges)
        planned.layout = layout
        return planned


def layout_of(charges: Sequence[Charge]) -> Layout:
    """The layout ``charges`` carry, or the one worked out for them now."""
    return charges.layout if isinstance(charges, Charges) else Layout.of(charges)


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Lease:
    """What an admitted acquisition charged: settle it exactly once.

    ``id`` is unique per acquisition (it names the in-flight slots);
    ``charged_at`` is the ``now`` of the acquisition, from which the window
    buckets of the reservation are derived; ``mark`` the value of the charges'
    ``MarkCharge`` then (0: none), which tells the settle whether the budget counters
    were restored since (a back end that lost its data: state/lua/settle.lua).
    """

    id: str
    charges: tuple[Charge, ...]
    charged_at: float
    mark: int = 0


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class Verdict:
    """The answer of one acquisition.

    Admitted: ``lease`` is set, ``refused`` is None, ``totals[i]`` is counter
    ``i``'s usage after the charge. Refused: nothing was charged, ``refused`` is
    the index of the first charge (in the order given) that did not fit and
    ``retry_after`` the seconds until it would fit if nothing else were charged
    (window: when enough weight leaves; period: when it resets; in-flight: a
    short fixed pause, since nobody knows when a slot frees).

    ``claim`` is the outcome of the fair-share claim made in the same step
    (``CounterStore.acquire(..., claim=...)``): None when none was asked for or
    when a limit refused (a refused request claims nothing).
    """

    lease: Lease | None
    refused: int | None = None
    retry_after: float | None = None
    totals: tuple[int, ...] = ()
    claim: Claim | None = None

    @property
    def admitted(self) -> bool:
        return self.lease is not None


def check_distinct(charges: Sequence[Charge]) -> None:
    """``ValueError`` unless every charge names a different counter."""
    keys = {c.key for c in charges}
    if len(keys) != len(charges):
        raise ValueError("one acquisition must not charge the same counter twice")
