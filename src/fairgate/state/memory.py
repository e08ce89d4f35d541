"""``CounterStore`` in this process's memory: the default for one gateway process.

Atomicity comes from asyncio itself: no operation awaits between its check and
its charge, so no other task runs in between. Nothing survives the process,
and several processes would each count alone (the gateway refuses
``--workers N > 1`` without Redis). Memory stays bounded: a window keeps at most
``granules + 1`` buckets, and counters past their keep-until are swept once a
minute of the callers' time.

``snapshot`` and ``restore`` carry the window and period counters and the
fair-share usage records across a restart (``fairgate.accounting.snapshots``
saves them to the store every ``state.snapshot_interval``); in-flight slots and
fair-share claims are never carried over.

It also holds the fair-share state (``fairgate.limits.FairShareState``):
within-share slots per pool and organisation, and decayed usage per pool and
organisation as ``DecayedUsage`` records. Both are bounded by the configured
pools and organisations; an empty slot set is dropped on release.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fairgate.fairshare.decay import DecayedUsage
from fairgate.limits.charges import (
    IN_FLIGHT_RETRY_AFTER,
    Charge,
    Charges,
    InFlightCharge,
    Layout,
    Lease,
    MarkCharge,
    PeriodCharge,
    Verdict,
    WindowCharge,
    layout_of,
)
from fairgate.limits.fairshare_state import Claim, ClaimRequest, Split, UsageCharge, lease_team
from fairgate.limits.snapshot import SavedCounter
from fairgate.limits.window import SlidingWindow, bucket_of

__all__ = ["MemoryCounterStore"]

_SWEEP_EVERY = 60.0


@dataclass(slots=True)
class _Period:
    value: int
    keep_until: float


class MemoryCounterStore:
    """Counters in one process (see ``fairgate.limits.store.CounterStore`` for the contract).

    Never raises ``StateUnavailable``; in-flight leases never expire (they die
    with the process), so ``refresh_interval`` is None.
    """

    def __init__(self) -> None:
        self._windows: dict[str, SlidingWindow] = {}
        self._periods: dict[str, _Period] = {}
        self._in_flight: dict[str, set[str]] = {}
        # (pool, org, group, in_org) → lease ids; group "" is the organisation's own set
        self._claims: dict[tuple[str, str, str, bool], set[str]] = {}
        self._records: dict[str, dict[str, DecayedUsage]] = {}  # pool → org → record
        self._team_records: dict[str, dict[tuple[str, str], DecayedUsage]] = {}
        self._ids = itertools.count(1)
        self._next_sweep = float("-inf")

    @property
    def refresh_interval(self) -> float | None:
        return None

    async def acquire(
        self, charges: Sequence[Charge], now: float, claim: ClaimRequest | None = None
    ) -> Verdict:
        verdict = self._acquire(charges, now)
        if claim is None or verdict.lease is None:
            return verdict
        taken = self._claim(claim.pool, claim.org, claim.reservation, now, claim.split, claim.team)
        return Verdict(verdict.lease, totals=verdict.totals, claim=taken)

    def _acquire(self, charges: Sequence[Charge], now: float) -> Verdict:
        # One pass per kind of charge (the layout says where each kind sits, so no charge
        # is asked its kind) finds each counter once, reads it and checks it; a second
        # charges the counters found. The bucket of ``now`` is computed once per window
        # shape (60 s in 60 granules, mostly), not once per window. When a charge does not
        # fit, ``_refusal`` names the first one in the order given.
        if isinstance(charges, Charges):
            layout = charges.layout
        else:  # kept with the lease, so that its settle finds the layout
            layout = Layout.of(charges)
            charges = Charges(charges, layout)
        self._maybe_sweep(now)
        count = len(charges)
        used = [0] * count
        found: list[Any] = [None] * count
        windows, periods, in_flight = self._windows, self._periods, self._in_flight
        buckets: list[int] = []
        for length, granules, positions in layout.windows:
            current = bucket_of(now, length, granules)
            buckets.append(current)
            for i in positions:
                charge: WindowCharge = charges[i]  # type: ignore[assignment]  # as laid out
                window = windows.get(charge.key)
                if window is None or window.length != length or window.granules != granules:
                    usage = 0  # absent, or cut differently (configuration changed)
                else:
                    usage = window.counted(current)  # prunes too: usage stays O(1)
                    found[i] = window
                if usage + charge.amount > charge.limit:
                    return self._refusal(charges, now)
                used[i] = usage
        for i in layout.periods:
            counter: PeriodCharge = charges[i]  # type: ignore[assignment]  # as laid out
            period = periods.get(counter.key)
            if period is None or now >= period.keep_until:
                usage = 0
            else:
                usage = period.value
                found[i] = period
            if (
                usage >= counter.limit
                if counter.overdraft
                else usage + counter.amount > counter.limit
            ):
                return self._refusal(charges, now)
            used[i] = usage
        for i in layout.in_flight:
            held = in_flight.get(charges[i].key)
            usage = 0 if held is None else len(held)
            if usage >= charges[i].limit:  # type: ignore[union-attr]  # as laid out
                return self._refusal(charges, now)
            found[i] = held
            used[i] = usage
        for i in layout.marks:
            if self._period(charges[i].key, now) is None:
                return self._refusal(charges, now)
            used[i] = 1
        lease = Lease(f"m{next(self._ids)}", charges, now)
        for (_, _, positions), current in zip(layout.windows, buckets, strict=True):
            for i in positions:
                charge = charges[i]  # type: ignore[assignment]  # as laid out
                window = found[i] or self._window(charge)
                window.add(current, charge.amount)
                used[i] += charge.amount
        for i in layout.periods:
            counter = charges[i]  # type: ignore[assignment]  # as laid out
            period = found[i]
            if period is None:
                period = periods[counter.key] = _Period(0, counter.keep_until)
            period.value += counter.amount
            used[i] += counter.amount
        for i in layout.in_flight:
            held = found[i]
            if held is None:
                held = in_flight[charges[i].key] = set()
            held.add(lease.id)
            used[i] += 1
        return Verdict(lease=lease, totals=tuple(used))

    def _refusal(self, charges: Sequence[Charge], now: float) -> Verdict:
        """The refusal of an acquisition some charge of which does not fit: the first
        one, in the order given, and when it would."""
        for index, charge in enumerate(charges):
            usage = self._usage(charge, now)
            if isinstance(charge, WindowCharge):
                fits = usage + charge.amount <= charge.limit
            elif isinstance(charge, InFlightCharge):
                fits = usage < charge.limit
            elif isinstance(charge, MarkCharge):
                fits = self._period(charge.key, now) is not None
            else:
                fits = (
                    usage < charge.limit
                    if charge.overdraft
                    else usage + charge.amount <= charge.limit
                )
            if not fits:
                return Verdict(lease=None, refused=index, retry_after=self._wait(charge, now))
        raise AssertionError("an acquisition was refused but every charge fits")

    async def settle(
        self,
        lease: Lease | None,
        actual: Mapping[str, int],
        now: float,
        release: Claim | None = None,
        charge: UsageCharge | None = None,
    ) -> None:
        if lease is not None:
            self._settle(lease, actual, now)
        if release is not None:
            self._release(release)
        if charge is not None:
            c = charge
            self._charge_usage(c.pool, c.org, c.cost_units, now, c.half_life, c.team)

    def _settle(self, lease: Lease, actual: Mapping[str, int], now: float) -> None:
        charges = lease.charges
        layout = layout_of(charges)
        for i in layout.in_flight:
            held = self._in_flight.get(charges[i].key)
            if held is not None:
                held.discard(lease.id)
        if not actual:
            return
        windows = self._windows
        for length, granules, positions in layout.windows:
            charged_in = None  # the bucket of the reservation, computed once per shape
            for i in positions:
                window_charge: WindowCharge = charges[i]  # type: ignore[assignment]  # as laid out
                key = window_charge.key
                if key not in actual:
                    continue
                delta = actual[key] - window_charge.amount
                if delta < 0:  # a refund goes back where the estimate was charged
                    window = windows.get(key)
                    if (
                        window is not None
                        and window.length == length
                        and window.granules == granules
                    ):
                        if charged_in is None:
                            charged_in = bucket_of(lease.charged_at, length, granules)
                        window.add(charged_in, delta)
                elif delta > 0:  # an excess weighs for a full window from now on
                    window = self._window(window_charge)
                    window.add(window.bucket(now), delta)
        periods = self._periods
        for i in layout.periods:
            counter: PeriodCharge = charges[i]  # type: ignore[assignment]  # as laid out
            if counter.key in actual:
                delta = actual[counter.key] - counter.amount
                period = periods.get(counter.key)
                if delta and period is not None and now < period.keep_until:
                    value = period.value + delta
                    period.value = value if value > 0 else 0

    async def read(self, counters: Sequence[Charge], now: float) -> tuple[int, ...]:
        return tuple(self._usage(counter, now) for counter in counters)

    async def seed(
        self,
        counter: PeriodCharge,
        total: int,
        now: float,
        *,
        track: float = 0.0,
        uncharged: bool = False,
    ) -> None:
        # one process: no other gateway charges these counters, so a budget new to it
        # was charged by none, and its records hold everything it spent
        period = self._period(counter.key, now)
        if period is None:
            self._periods[counter.key] = _Period(max(0, total), counter.keep_until)
        else:
            period.value = max(period.value, total)
            period.keep_until = max(period.keep_until, counter.keep_until)

    async def refresh(self, now: float) -> None:
        return None

    async def claim(
        self,
        pool: str,
        org: str,
        reservation: int,
        now: float,
        split: Split | None = None,
        team: str | None = None,
    ) -> Claim:
        return self._claim(pool, org, reservation, now, split, team)

    def _claim(
        self,
        pool: str,
        org: str,
        reservation: int,
        now: float,
        split: Split | None,
        team: str | None,
    ) -> Claim:
        if split is None:
            held = self._claims.get((pool, org, "", False))
            count = 0 if held is None else len(held)
            if count >= reservation:
                return Claim(pool, org, False, count, None, now)
            lease = self._lease(team)
            self._claims.setdefault((pool, org, "", False), set()).add(lease)
            return Claim(pool, org, True, count, lease, now)
        own = len(self._claims.get((pool, org, split.group, False), ()))
        if own < split.reservation:
            lease = self._lease(team)
            self._claims.setdefault((pool, org, split.group, False), set()).add(lease)
            return Claim(pool, org, True, own, lease, now, group=split.group)
        total = sum(
            len(self._claims.get((pool, org, group, in_org), ()))
            for group in ("", *split.groups)
            for in_org in (False, True)
        )
        if total >= reservation:
            return Claim(pool, org, False, total, None, now, group=split.group)
        lease = self._lease(team)
        self._claims.setdefault((pool, org, split.group, True), set()).add(lease)
        return Claim(pool, org, True, total, lease, now, group=split.group, in_org=True)

    async def release(self, claim: Claim) -> None:
        self._release(claim)

    def _release(self, claim: Claim) -> None:
        key = (claim.pool, claim.org, claim.group or "", claim.in_org)
        held = self._claims.get(key)
        if held is None or claim.lease is None:
            return
        held.discard(claim.lease)
        if not held:
            del self._claims[key]

    async def in_flight(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, int]:
        counts: dict[str, int] = {}
        for (p, org, group, in_org), held in self._claims.items():
            counted = (group == "" and not in_org) or org in (groups or {})
            if p == pool and held and counted:
                counts[org] = counts.get(org, 0) + len(held)
        return counts

    async def team_in_flight(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for (p, org, group, in_org), held in self._claims.items():
            if p != pool or not ((group == "" and not in_org) or org in (groups or {})):
                continue
            for lease in held:
                team = lease_team(lease)
                if team is not None:
                    teams = counts.setdefault(org, {})
                    teams[team] = teams.get(team, 0) + 1
        return counts

    async def team_usage(
        self, pool: str, now: float, half_life: float
    ) -> dict[str, dict[str, float]]:
        usage: dict[str, dict[str, float]] = {}
        for (org, team), r in self._team_records.get(pool, {}).items():
            value = DecayedUsage(r.value, r.at, half_life).value_at(now)
            usage.setdefault(org, {})[team] = value
        return usage

    async def usage(self, pool: str, now: float, half_life: float) -> dict[str, float]:
        records = self._records.get(pool, {})
        return {
            org: DecayedUsage(r.value, r.at, half_life).value_at(now) for org, r in records.items()
        }

    async def charge(
        self,
        pool: str,
        org: str,
        cost_units: float,
        now: float,
        half_life: float,
        team: str | None = None,
    ) -> None:
        self._charge_usage(pool, org, cost_units, now, half_life, team)

    def _charge_usage(
        self, pool: str, org: str, cost_units: float, now: float, half_life: float, team: str | None
    ) -> None:
        records = self._records.setdefault(pool, {})
        records[org] = _charged(records.get(org), cost_units, now, half_life)
        if team is not None:
            teams = self._team_records.setdefault(pool, {})
            teams[(org, team)] = _charged(teams.get((org, team)), cost_units, now, half_life)

    def _lease(self, team: str | None) -> str:
        lease = f"m{next(self._ids)}"
        return lease if team is None else f"{lease}/{team}"

    async def aclose(self) -> None:
        return None

    def snapshot(self, now: float) -> list[SavedCounter]:
        """Every window and period counter still counting at ``now``, and every fair-share
        usage record, as saved data."""
        saved: list[SavedCounter] = []
        for key, window in self._windows.items():
            window.prune(now)
            if window.buckets:
                data = {
                    "length": window.length,
                    "granules": window.granules,
                    "buckets": sorted(window.buckets.items()),
                }
                saved.append(SavedCounter(key, "window", data))
        for key, period in self._periods.items():
            if now < period.keep_until and period.value > 0:
                data = {"value": period.value, "keep_until": period.keep_until}
                saved.append(SavedCounter(key, "period", data))
        for pool, records in self._records.items():
            for org, record in records.items():
                data = {"org": org, "value": record.value, "at": record.at}
                saved.append(SavedCounter(pool, "usage", {**data, "half_life": record.half_life}))
        for pool, team_records in self._team_records.items():
            for (org, team), record in team_records.items():
                data = {"org": org, "team": team, "value": record.value, "at": record.at}
                saved.append(SavedCounter(pool, "usage", {**data, "half_life": record.half_life}))
        return saved

    def restore(self, saved: Sequence[SavedCounter], now: float) -> int:
        """Raise the counters to the saved ones (never lowering one); how many were restored.

        A saved window merges bucket by bucket (the larger weight wins); a period
        counter takes the larger value, like ``seed``; a fair-share usage record the
        larger value decayed to ``now``. Malformed entries are skipped.
        """
        restored = 0
        for counter in saved:
            try:
                if counter.kind == "window":
                    restored += self._restore_window(counter.key, counter.data, now)
                elif counter.kind == "period":
                    restored += self._restore_period(counter.key, counter.data, now)
                elif counter.kind == "usage":
                    restored += self._restore_usage(counter.key, counter.data, now)
            except (KeyError, TypeError, ValueError):
                continue
        return restored

    def _restore_window(self, key: str, data: Mapping[str, Any], now: float) -> bool:
        length, granules = float(data["length"]), int(data["granules"])
        if length <= 0 or granules < 1:
            return False
        window = self._windows.get(key)
        if window is None or (window.length, window.granules) != (length, granules):
            window = self._windows[key] = SlidingWindow(length, granules)
        for bucket, weight in data["buckets"]:
            missing = int(weight) - window.buckets.get(int(bucket), 0)
            if missing > 0:
                window.add(int(bucket), missing)
        window.prune(now)
        if not window.buckets:
            del self._windows[key]
            return False
        return True

    def _restore_usage(self, pool: str, data: Mapping[str, Any], now: float) -> bool:
        org = str(data["org"])
        saved = DecayedUsage(float(data["value"]), float(data["at"]), float(data["half_life"]))
        if "team" in data:
            teams = self._team_records.setdefault(pool, {})
            key = (org, str(data["team"]))
            kept = teams.get(key)
            if kept is None or saved.value_at(now) > kept.value_at(now):
                teams[key] = saved
            return True
        records = self._records.setdefault(pool, {})
        held = records.get(org)
        if held is None or saved.value_at(now) > held.value_at(now):
            records[org] = saved
        return True

    def _restore_period(self, key: str, data: Mapping[str, Any], now: float) -> bool:
        value, keep_until = int(data["value"]), float(data["keep_until"])
        if now >= keep_until or value <= 0:
            return False
        period = self._period(key, now)
        if period is None:
            self._periods[key] = _Period(value, keep_until)
        else:
            period.value = max(period.value, value)
            period.keep_until = max(period.keep_until, keep_until)
        return True

    def _wait(self, charge: Charge, now: float) -> float:
        """Seconds until a refused ``charge`` would fit, if nothing else were charged."""
        if isinstance(charge, WindowCharge):
            window = self._shaped(charge) or SlidingWindow(charge.window, charge.granules)
            return window.retry_after(charge.amount, charge.limit, now)
        if isinstance(charge, InFlightCharge):
            return IN_FLIGHT_RETRY_AFTER
        if isinstance(charge, MarkCharge):
            return 0.0  # it is there once the step that leaves it has run
        return max(0.0, charge.resets_at - now)

    def _usage(self, counter: Charge, now: float) -> int:
        if isinstance(counter, WindowCharge):
            window = self._shaped(counter)
            return 0 if window is None else window.usage(now)
        if isinstance(counter, InFlightCharge):
            return len(self._in_flight.get(counter.key, ()))
        period = self._period(counter.key, now)
        return 0 if period is None else period.value

    def _shaped(self, charge: WindowCharge) -> SlidingWindow | None:
        """The window of ``charge``, unless absent or cut differently (configuration changed)."""
        window = self._windows.get(charge.key)
        if window is None or (window.length, window.granules) != (charge.window, charge.granules):
            return None
        return window

    def _window(self, charge: WindowCharge) -> SlidingWindow:
        window = self._shaped(charge)
        if window is None:  # new, or its shape changed: start it afresh
            window = self._windows[charge.key] = SlidingWindow(charge.window, charge.granules)
        return window

    def _period(self, key: str, now: float) -> _Period | None:
        period = self._periods.get(key)
        if period is None or now >= period.keep_until:
            return None
        return period

    def _maybe_sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + _SWEEP_EVERY
        self._periods = {k: p for k, p in self._periods.items() if now < p.keep_until}
        self._in_flight = {k: s for k, s in self._in_flight.items() if s}
        for window in self._windows.values():
            window.prune(now)
        self._windows = {k: w for k, w in self._windows.items() if w.buckets}


def _charged(
    stored: DecayedUsage | None, cost_units: float, now: float, half_life: float
) -> DecayedUsage:
    if stored is None:
        return DecayedUsage(0.0, now, half_life).charged(cost_units, now)
    if stored.half_life != half_life:  # the configured half-life changed
        stored = DecayedUsage(stored.value, stored.at, half_life)
    return stored.charged(cost_units, now)
