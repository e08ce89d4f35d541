"""Usage that fades with a half-life, like Slurm's ``PriorityDecayHalfLife``.

    decay(v, dt, h) = v · exp(−ln 2 · dt / h)

    decay(8.0, dt=168h, half_life=168h) == 4.0
    decay(8.0, dt=336h, half_life=168h) == 2.0

Slurm multiplies by ``(1 − ln 2 / h)`` once per elapsed period, the first-order
expansion of the same factor; the exact exponential composes without drift:
``decay(decay(v, a, h), b, h) == decay(v, a + b, h)`` up to float rounding, so
the value does not depend on how often it is brought up to date.

A :class:`DecayedUsage` is the pair ``(value, at)`` the state back end stores per
pool and organisation. Usage is the cost a request actually consumed, charged
once when it finishes; time spent queued costs nothing, or a flooding tenant
would look as consumed as the tenant it starves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairgate.core.money import MICRO, Money

__all__ = ["DEFAULT_HALF_LIFE", "DecayedUsage", "decay"]

DEFAULT_HALF_LIFE = 168 * 3600.0
"""Seven days, in seconds (the configuration's ``fairshare.half_life: 168h``)."""

_LN2 = math.log(2.0)


def decay(value: float, dt: float, half_life: float) -> float:
    """``value`` after ``dt`` seconds of exponential decay with ``half_life`` seconds.

    ``half_life`` must be positive (``math.inf`` means no decay); ``dt`` must not
    be negative. Raises ``ValueError`` otherwise.
    """
    if not half_life > 0:
        raise ValueError(f"half_life must be positive, got {half_life!r}")
    if not dt >= 0:
        raise ValueError(f"dt must not be negative, got {dt!r}")
    return value * math.exp(-_LN2 * dt / half_life)


# built on every request: slotted, not frozen (docs/architecture.md, "Value types")
@dataclass(slots=True)
class DecayedUsage:
    """Decayed usage of one organisation in one pool: ``value`` as it stood at time ``at``.

    Immutable: :meth:`charged` returns a new record. Times are seconds on any
    clock all gateway replicas share (Unix time); values are in cost units
    (GPU-hours, or whatever unit the prices use), never negative. A ``now``
    earlier than ``at`` (clocks of two gateway replicas a little apart) is read
    as ``at``: usage never grows by going back in time.
    """

    value: float = 0.0
    at: float = 0.0
    half_life: float = DEFAULT_HALF_LIFE

    def __post_init__(self) -> None:
        if not self.half_life > 0:
            raise ValueError(f"half_life must be positive, got {self.half_life!r}")
        if not 0.0 <= self.value < math.inf:  # finite, not negative (NaN fails too)
            raise ValueError(f"usage must be finite and non-negative, got {self.value!r}")

    def value_at(self, now: float) -> float:
        """The decayed value at ``now``."""
        return decay(self.value, max(0.0, now - self.at), self.half_life)

    def charged(self, amount: float | Money, now: float) -> DecayedUsage:
        """This usage decayed to ``now`` plus ``amount`` (a cost; ``Money`` is read in units)."""
        units = amount.micro / MICRO if isinstance(amount, Money) else float(amount)
        if not 0.0 <= units < math.inf:  # finite, not negative (NaN fails too)
            raise ValueError(f"a charge must be finite and non-negative, got {amount!r}")
        # max(now, at) and value_at(when), written out (twice a request): the half-life
        # was checked at construction and the elapsed time is never negative here.
        at = self.at
        when = at if at > now else now
        elapsed = when - at
        value = self.value * math.exp(-_LN2 * (elapsed if elapsed > 0.0 else 0.0) / self.half_life)
        return DecayedUsage(value + units, when, self.half_life)
