"""A pool's capacity C learned from its engines: the concurrency it sustains without preemption.

Pure: the readings and the time are handed in; nothing here scrapes or sleeps.

Each scrape of a replica gives its running count r, its KV-cache use k (0..1)
and the engine's cumulative preemption counter. With the KV limit L:

    clean reading   nothing preempted since the last reading and k ≤ L:
                    the replica sustains e = r
    full reading    k > L: e = ⌊r · L / k⌋ requests fit at KV use L
    value           falls to e at once on a full reading whose e is below it;
                    rises on sustained evidence: once clean or full readings
                    with e above it have come for rise_after seconds, to the
                    lowest of them; a full reading with e at the value stops a rise
    C               Σ values of the replicas taking part, within [floor, ceiling]

A clean reading at or below the value (light load) is no evidence either way:
it neither lowers the value nor stops a rise. Neither is a reading with KV at
most L but preemptions since the last one: they happened between two scrapes,
at a running count nobody saw (the engine may hold far fewer requests by the
time it is read); a cache that fills shows up as full readings. A saturated
engine preempts all the time (borrowers fill it past C on purpose), which is
why full readings count whether or not it preempted. Only an engine that
exports no KV use is lowered by its preemptions, to the running count read
with them.

A replica takes part from its first reading with known metrics; it drops out
(its value forgotten, so it is learned again from 0) when it is unhealthy, when
its metrics stay unknown for ``hold`` seconds, or when its preemption counter
goes backwards (the engine restarted, perhaps with another KV cache).

Worked example: floor 8, ceiling 64, L = 0.9, rise_after 10 s, two replicas.

    t=0   r0 running 12 KV 0.50, r1 running 10 KV 0.40    streaks start; C = 8 (floor)
    t=5   r0 running 14 KV 0.55, r1 running 11 KV 0.45    still 0 + 0 → C = 8
    t=10  r0 running 13 KV 0.52, r1 running 12 KV 0.48    10 s above: r0 → 12, r1 → 10; C = 22
    t=11  r0 running 11 KV 0.99 (full), r1 as at t=10     e = ⌊11·0.9/0.99⌋ = 10 → r0 10; C = 20
    t=12  r1 unhealthy                                    r1 drops out; C = 10
    t=13  r1 back, running 4 KV 0.20                      r1 joins at 0, learned again; C = 10

``seats`` splits C over the replicas by their values (scaled so they sum to C),
or by weight while no value is known yet.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["DEFAULT_KV_LIMIT", "DEFAULT_RISE_AFTER", "CapacityLearner", "Learned", "Reading"]

DEFAULT_KV_LIMIT = 0.9
"""KV-cache use above which a reading shows the replica over what it sustains."""

DEFAULT_RISE_AFTER = 10.0
"""Seconds of evidence above a replica's value before the value rises."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One replica at one scrape: ``running`` ``None`` when its metrics are unknown,
    ``kv_usage`` in [0, 1] or ``None``, ``preemptions`` the engine's cumulative counter
    or ``None``; ``weight`` splits C while no value is learned."""

    replica: str
    healthy: bool = True
    running: float | None = None
    kv_usage: float | None = None
    preemptions: float | None = None
    weight: int = 1


@dataclass(frozen=True, slots=True)
class Learned:
    """The learned C of one pool, the value of every replica taking part, and why C
    last moved (``reason``, at ``changed_at``; ``None`` while C has not moved)."""

    capacity: int
    floor: int
    ceiling: int
    replicas: Mapping[str, int] = field(default_factory=dict)
    reason: str | None = None
    changed_at: float | None = None

    def seats(self, weights: Mapping[str, int]) -> dict[str, float]:
        """Each replica of ``weights`` (key → weight)'s part of C: its value scaled so the
        parts sum to C; by weight among those taking part while no value is known (among
        all of them while none takes part); 0 for one that has dropped out.

            Learned(20, 8, 64, {"r0": 12, "r1": 4}).seats({"r0": 1, "r1": 1}) == {"r0": 15.0, "r1": 5.0}
        """  # noqa: E501
        total = sum(self.replicas.get(key, 0) for key in weights)
        if total > 0:
            return {key: self.capacity * self.replicas.get(key, 0) / total for key in weights}
        present = {k: w for k, w in weights.items() if k in self.replicas} or dict(weights)
        weight = sum(present.values()) or 1
        return {key: self.capacity * present.get(key, 0) / weight for key in weights}


@dataclass(slots=True)
class _Replica:
    value: int = 0
    streak_since: float | None = None
    streak_low: int = 0
    preemptions: float | None = None
    unknown_since: float | None = None


class CapacityLearner:
    """Learns one pool's C from its replicas' readings (module docstring).

    ``floor`` and ``ceiling`` (1 ≤ floor ≤ ceiling) bound C; ``kv_limit`` in
    (0, 1]; ``rise_after`` ≥ 0 and ``hold`` ≥ 0 in seconds. ``observe`` takes
    ``now`` on any monotonic clock, O(replicas). Raises ``ValueError`` on
    parameters out of range.
    """

    def __init__(
        self,
        floor: int,
        ceiling: int,
        *,
        kv_limit: float = DEFAULT_KV_LIMIT,
        rise_after: float = DEFAULT_RISE_AFTER,
        hold: float = 0.0,
    ) -> None:
        if not 1 <= floor <= ceiling:
            raise ValueError(f"need 1 <= floor <= ceiling, got {floor!r} and {ceiling!r}")
        if not 0 < kv_limit <= 1:
            raise ValueError(f"kv_limit must be in (0, 1], got {kv_limit!r}")
        if not (rise_after >= 0 and hold >= 0):
            raise ValueError("rise_after and hold must not be negative")
        self.kv_limit = float(kv_limit)
        self.rise_after = float(rise_after)
        self.hold = float(hold)
        self._replicas: dict[str, _Replica] = {}
        self._learned = Learned(floor, floor, ceiling)
        self._events: list[str] = []

    @property
    def learned(self) -> Learned:
        return self._learned

    def observe(self, readings: Iterable[Reading], now: float) -> Learned:
        """Learn from one scrape of every replica of the pool, taken at ``now``; a
        replica missing from ``readings`` drops out."""
        seen: set[str] = set()
        for reading in readings:
            seen.add(reading.replica)
            self._step(reading, now)
        for key in [k for k in self._replicas if k not in seen]:
            self._drop(key, "is no longer listed")
        events, self._events = self._events, []
        old = self._learned
        values = {key: state.value for key, state in self._replicas.items()}
        capacity = min(old.ceiling, max(old.floor, sum(values.values())))
        moved = capacity != old.capacity
        self._learned = Learned(
            capacity,
            old.floor,
            old.ceiling,
            MappingProxyType(values),
            "; ".join(events) if moved else old.reason,
            now if moved else old.changed_at,
        )
        return self._learned

    def _step(self, reading: Reading, now: float) -> None:
        key = reading.replica
        state = self._replicas.get(key)
        if not reading.healthy:
            if state is not None:
                self._drop(key, "is unhealthy")
            return
        if reading.running is None:
            if state is not None:
                state.unknown_since = now if state.unknown_since is None else state.unknown_since
                if now - state.unknown_since >= self.hold:
                    self._drop(key, f"has had no metrics for {now - state.unknown_since:g}s")
            return
        if state is not None and _went_back(state.preemptions, reading.preemptions):
            self._drop(key, "restarted (its preemption counter went back)")
            state = None
        if state is None:
            state = self._replicas[key] = _Replica(preemptions=reading.preemptions)
            self._events.append(f"{key} joined")
        state.unknown_since = None
        preempted = _rose(state.preemptions, reading.preemptions)
        state.preemptions = reading.preemptions
        self._learn(key, state, reading, preempted, now)

    def _learn(
        self, key: str, state: _Replica, reading: Reading, preempted: bool, now: float
    ) -> None:
        running = max(0, math.floor(reading.running or 0.0))
        kv = reading.kv_usage
        full = kv is not None and kv > self.kv_limit
        fits = math.floor(running * self.kv_limit / kv + 1e-9) if full and kv else running
        if full and fits < state.value:
            self._fall(key, state, fits, f"KV {kv:.2f} over {self.kv_limit:g} at {running} running")
        elif full and fits == state.value:
            state.streak_since = None  # the value is what fits now: no rise
        elif preempted and not full:
            if kv is None and running < state.value:
                self._fall(key, state, running, f"preempted at {running} running (no KV metric)")
        elif fits > state.value:
            if state.streak_since is None:
                state.streak_since, state.streak_low = now, fits
            state.streak_low = min(state.streak_low, fits)
            lasted = now - state.streak_since
            if lasted >= self.rise_after:
                self._events.append(
                    f"{key} rose {state.value} -> {state.streak_low}: "
                    f"{state.streak_low} or more sustained for {lasted:.0f}s"
                )
                state.value, state.streak_since = state.streak_low, None

    def _fall(self, key: str, state: _Replica, to: int, why: str) -> None:
        self._events.append(f"{key} fell {state.value} -> {to}: {why}")
        state.value, state.streak_since = to, None

    def _drop(self, key: str, why: str) -> None:
        state = self._replicas.pop(key)
        self._events.append(f"{key} {why}: drops out with {state.value}")


def _rose(before: float | None, after: float | None) -> bool:
    return before is not None and after is not None and after > before


def _went_back(before: float | None, after: float | None) -> bool:
    return before is not None and after is not None and after < before
