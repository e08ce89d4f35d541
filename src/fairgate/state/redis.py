"""``CounterStore`` in Redis: one limit across every gateway that shares the server.

Each operation is one Lua script (EVALSHA, loaded again after NOSCRIPT, e.g. when
Redis restarted), so check-and-charge is atomic across gateways. Every call is
bounded by ``timeout`` and goes through a ``Breaker``: Redis errors, timeouts and
an open breaker all surface as ``StateUnavailable``. The client never retries by
itself (a retried script could charge twice, and retries turn an outage into a
queue of slow requests).

Key layout (``prefix`` default ``fairgate:``), each with an expiry:

    <prefix>rpm:<key> / tpm:<key>          hash   bucket index → weight     window + 2 granules
    <prefix>rpd:<key>:<day>                string requests that day          keep-until
    <prefix>budget:<kind>:<scope>:<model|*>:<period>:<label>  string micro-units  keep-until
    <prefix>inflight:<key>                 zset   lease id → expiry (s)      2 × lease_ttl
    <prefix>fairshare:inflight:<pool>:<org>  zset lease id → expiry (s)      2 × lease_ttl
    <prefix>fairshare:inflight:<pool>:<org>:t:<team>   the same, a team's sub-reservation
    <prefix>fairshare:inflight:<pool>:<org>:b:<team>   the same, a team's in-org seats
    <prefix>fairshare:inflight:<pool>:<org>:b:         the same, the rest's in-org seats
    <prefix>fairshare:orgs:<pool>          zset   org → latest expiry (s)    2 × lease_ttl
    <prefix>fairshare:usage:<pool>         hash   org → "value at"           20 half-lives
    <prefix>fairshare:teamusage:<pool>     hash   <org>:<team> → "value at"  20 half-lives

(``%`` and ``:`` in pool and organisation names are escaped, so keys never collide.)

In-flight slots are leases with an expiry ``lease_ttl`` after the caller's
``now``; a live gateway extends its own with ``refresh`` (``LeaseRefresher``), so
a gateway that dies frees its slots within ``lease_ttl``. Time is the caller's:
gateways whose clocks disagree by ``s`` seconds share a window as if it were
``s`` seconds shorter, so keep them on NTP. Not for Redis Cluster: one
acquisition touches keys of several scopes, which must live on one server.

The fair-share state (``fairgate.limits.FairShareState``) lives here too:
within-share slots are leases like in-flight slots (kept alive by the same
``refresh``), usage is one hash per pool, charged by a Lua step and read with
one HGETALL. Each pool also keeps an index of the organisations that claimed
there (``fairshare:orgs:<pool>``, written by the claim, refreshed with the
slots), so ``in_flight`` reads the whole pool in one script without scanning.
A claim for an organisation without team sub-shares is today's one script on
one slot set; with them (``team_claim.lua``) it reads every slot set of the
organisation in the same single script. A lease id is ``<hex>/<team>`` when
the team is known, which ``team_in_flight`` counts by.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError, RedisError, ResponseError

from fairgate.core.breaker import Breaker
from fairgate.fairshare.decay import decay
from fairgate.limits.charges import (
    IN_FLIGHT_RETRY_AFTER,
    Charge,
    InFlightCharge,
    Lease,
    MarkCharge,
    PeriodCharge,
    Verdict,
    WindowCharge,
    check_distinct,
)
from fairgate.limits.fairshare_state import Claim, ClaimRequest, Split, UsageCharge
from fairgate.limits.store import StateUnavailable
from fairgate.limits.window import bucket_of
from fairgate.state.deadline import Deadline
from fairgate.state.replies import ReplyThenCancelled
from fairgate.state.scripts import Script, ScriptPipe
from fairgate.state.target import RedisTarget, close_client

__all__ = ["RedisCounterStore"]

_REFRESH_BATCH = 500
_USAGE_KEEP_HALF_LIVES = 20  # an idle pool's usage is forgotten at 1e-6 of its value
_USAGE_KEEP_MAX = 400 * 86_400.0  # ... or after 400 idle days (no decay at all)

log = logging.getLogger(__name__)


def _lua(name: str) -> str:
    return resources.files("fairgate.state").joinpath(f"lua/{name}.lua").read_text("utf-8")


def _functions(*names: str) -> str:
    """Scripts as local Lua functions of (KEYS, ARGV), for a script that runs several."""
    return "".join(f"local function {name}(KEYS, ARGV)\n{_lua(name)}\nend\n" for name in names)


def _window_ms(charge: WindowCharge) -> int:
    return math.ceil((charge.window + 2 * charge.window / charge.granules) * 1000)


class RedisCounterStore:
    """Counters in Redis (see ``fairgate.limits.store.CounterStore`` for the contract).

    ``url`` is a ``redis://`` or ``rediss://`` URL (a secret: never logged), or a
    ``RedisTarget`` (Sentinels that name the primary, ``fairgate.state.target``);
    ``timeout`` (s, > 0) bounds every call including connecting; ``lease_ttl``
    (s, > 0) is how long an in-flight slot outlives its gateway's last refresh;
    ``breaker`` defaults to 3 failures → open for 1 s; at most ``max_connections``
    (>= 1) connections are open at once. The scripts run pipelined on one of them, at
    most three quarters of ``max_connections`` calls in flight; past them a script call
    waits its turn, up to ``wait_timeout`` (s, > 0): a burst queued in this gateway,
    not a Redis failure, so the wait is not counted by the breaker and is not under
    ``timeout``. The other commands (``release``, the usage reads, the siblings'
    ``guarded``) each hold a pooled connection, at most ``max_connections - 1`` at once
    (one is the scripts'); past them a command waits the same way, within
    ``wait_timeout`` and not counted.
    Raises ``StateUnavailable`` on any Redis failure or a wait that ran out; never
    retries.
    """

    def __init__(
        self,
        url: str | RedisTarget,
        *,
        prefix: str = "fairgate:",
        timeout: float = 0.5,
        lease_ttl: float = 30.0,
        breaker: Breaker | None = None,
        max_connections: int = 50,
        wait_timeout: float = 5.0,
    ) -> None:
        if timeout <= 0 or lease_ttl <= 0 or max_connections < 1 or wait_timeout <= 0:
            raise ValueError(
                "timeout, lease_ttl, max_connections and wait_timeout must be positive"
            )
        self.prefix = prefix
        self.lease_ttl = lease_ttl
        self._timeout = timeout
        self._wait_timeout = wait_timeout
        self._breaker = breaker or Breaker.fixed(threshold=3, cooldown=1.0)
        # a blocking pool: past ``max_connections`` calls wait for a free connection
        # (within ``timeout``) instead of failing at once with "Too many connections"
        target = RedisTarget(url) if isinstance(url, str) else url
        pool = target.pool(max_connections=max_connections, timeout=timeout)
        self._redis: Redis = Redis.from_pool(pool)
        # the scripts run pipelined on one connection of their own, at most three
        # quarters of ``max_connections`` calls in flight (``fairgate.state.scripts``)
        self._scripts = ScriptPipe(
            pool, window=max_connections - max_connections // 4, bound=timeout
        )
        self._acquire = Script(_lua("acquire"))
        self._settle = Script(_lua("settle"))
        self._read = Script(_lua("read"))
        self._seed = Script(_lua("seed"))
        self._refresh = Script(_lua("refresh"))
        self._claim = Script(_lua("claim"))
        self._team_claim = Script(_lua("team_claim"))
        self._in_flight = Script(_lua("in_flight"))
        self._charge = Script(_lua("charge"))
        # a request's way in and way out, each one script (one round trip)
        self._enter = Script(_functions("acquire", "claim", "team_claim") + _lua("enter"))
        self._leave = Script(_functions("settle", "charge") + _lua("leave"))
        # the commands on pooled connections: no more at once than the pool has beside
        # the scripts' own, so the pool never makes one wait under ``timeout`` (which the
        # breaker would count: a burst of this gateway's taken for a Redis failure)
        self._pooled_room = asyncio.Semaphore(max(1, max_connections - 1))
        # lease id → the (sorted set, member) pairs its refresh extends
        self._held: dict[str, tuple[tuple[str, str], ...]] = {}
        self._pending: set[asyncio.Future[Any]] = set()  # work of cancelled callers

    @property
    def refresh_interval(self) -> float | None:
        return self.lease_ttl / 3

    @property
    def breaker(self) -> Breaker:
        return self._breaker

    async def acquire(
        self, charges: Sequence[Charge], now: float, claim: ClaimRequest | None = None
    ) -> Verdict:
        check_distinct(charges)
        lease_id = secrets.token_hex(8)
        args: list[str | int | float] = [now, lease_id, self.lease_ttl]
        keys = [self.prefix + c.key for c in charges]
        _acquire_fields(charges, args)
        asked = None if claim is None or claim.reservation <= 0 else self._claim_call(claim, now)
        try:
            if asked is None:
                reply = await self._call(self._acquire, keys, args, hold=True)
            else:
                claim_keys, claim_args, kind, _ = asked
                head: list[str | int | float] = [len(keys), len(args), kind]
                reply = await self._call(
                    self._enter, keys + claim_keys, head + args + claim_args, hold=True
                )
        except ReplyThenCancelled as cancelled:
            # the caller is gone, but the script charged: give it straight back
            slot = None if asked is None or claim is None else (claim, asked[3])
            self._give_back(cancelled.reply, lease_id, charges, now, slot)
            raise asyncio.CancelledError from None
        taken: Claim | None = None
        if asked is not None:
            assert claim is not None
            if len(reply) > 1:
                taken = self._claimed(reply[1], claim.pool, claim.org, asked[3], claim.split, now)
            reply = reply[0]
        elif claim is not None:  # a reservation of 0: borrows, no round trip
            taken = self._borrowing(claim.pool, claim.org, claim.split, now)
        first = int(reply[0])
        if first > 0:
            retry_ms = int(reply[1])
            retry = IN_FLIGHT_RETRY_AFTER if retry_ms < 0 else retry_ms / 1000
            return Verdict(lease=None, refused=first - 1, retry_after=retry)
        held = tuple(
            [(k, lease_id) for k, c in zip(keys, charges, strict=True) if type(c) is InFlightCharge]
        )
        if held:
            self._held[lease_id] = held
        totals = tuple(map(int, reply[1:]))
        lease = Lease(lease_id, tuple(charges), now, _mark_of(charges, totals))
        return Verdict(lease=lease, totals=totals, claim=taken)

    async def settle(
        self,
        lease: Lease | None,
        actual: Mapping[str, int],
        now: float,
        release: Claim | None = None,
        charge: UsageCharge | None = None,
    ) -> None:
        keys: list[str] = []
        args: list[str | int | float] = []
        if lease is not None:
            # forget the lease first: even if Redis is down now, it is no longer refreshed
            # and its slot expires by itself
            self._held.pop(lease.id, None)
            keys = [self.prefix + c.key for c in lease.charges]
            args = [lease.id]
            _settle_fields(lease, actual, now, args)
        slot = release.lease if release is not None else None
        if slot is None and charge is None:
            if lease is None:
                return
            script = self._settle
        else:
            head: list[str | int | float] = [len(keys), len(args), 0, 0]
            if release is not None and slot is not None:
                self._held.pop(slot, None)  # no longer refreshed, even if Redis is down now
                head[2] = 1
                keys.append(self._slot_key(release))
                args.append(slot)
            if charge is not None:
                charge_keys, charge_args = self._charge_call(charge, now)
                head[3] = len(charge_keys)
                keys.extend(charge_keys)
                args.extend(charge_args)
            script, args = self._leave, head + args
        if not self._scripts.ready():
            # a caller cancelled in its ``finally`` must still give its slot back, also
            # while the call waits for a connection: the call runs as a task of its own
            await self._completed(self._call(script, keys, args))
            return
        try:
            await self._call(script, keys, args, hold=True)
        except ReplyThenCancelled:  # given back, and then the caller's cancellation
            raise asyncio.CancelledError from None

    async def read(self, counters: Sequence[Charge], now: float) -> tuple[int, ...]:
        if not counters:
            return ()
        args: list[str | int | float] = [repr(now)]
        for counter in counters:
            if isinstance(counter, WindowCharge):
                args.extend(("w", repr(counter.window), counter.granules))
            else:
                args.extend(("f" if isinstance(counter, InFlightCharge) else "p", 0, 0))
        reply = await self._call(self._read, [self._key(c) for c in counters], args)
        return tuple(map(int, reply))

    async def seed(
        self,
        counter: PeriodCharge,
        total: int,
        now: float,
        *,
        track: float = 0.0,
        uncharged: bool = False,
    ) -> None:
        keep_ms = max(1000, math.ceil((counter.keep_until - now) * 1000))
        keys = [self._key(counter)]
        if track > 0:
            keys.append(self._key(counter) + ":seeded")
        track_ms = max(1, math.ceil(track * 1000))
        args: list[str | int | float] = [max(0, total), keep_ms, track_ms, int(uncharged)]
        await self._call(self._seed, keys, args)

    async def refresh(self, now: float) -> None:
        # a pool's index appears once per slot held in it: extend it once
        pairs = list(dict.fromkeys(pair for held in self._held.values() for pair in held))
        expiry, keep_ms = repr(now + self.lease_ttl), math.ceil(2 * self.lease_ttl * 1000)
        for start in range(0, len(pairs), _REFRESH_BATCH):
            batch = pairs[start : start + _REFRESH_BATCH]
            args: list[str | int | float] = [expiry, keep_ms, *(member for _, member in batch)]
            await self._call(self._refresh, [key for key, _ in batch], args)

    async def claim(
        self,
        pool: str,
        org: str,
        reservation: int,
        now: float,
        split: Split | None = None,
        team: str | None = None,
    ) -> Claim:
        if reservation <= 0:  # nothing to reserve: always borrows, no round trip
            return self._borrowing(pool, org, split, now)
        keys, args, kind, lease = self._claim_call(
            ClaimRequest(pool, org, reservation, split, team), now
        )
        script = self._team_claim if kind == "t" else self._claim
        try:
            reply = await self._call(script, keys, args, hold=True)
        except ReplyThenCancelled as cancelled:
            # the caller is gone, but the slot may be taken: give it straight back
            group = None if split is None else split.group
            self._unclaim(cancelled.reply, pool, org, lease, group, now)
            raise asyncio.CancelledError from None
        return self._claimed(reply, pool, org, lease, split, now)

    def _claim_call(
        self, claim: ClaimRequest, now: float
    ) -> tuple[list[str], list[str | int | float], str, str]:
        """The keys and arguments of ``claim``'s script, which one (``"c"``: claim.lua,
        ``"t"``: team_claim.lua) and the lease id it takes."""
        pool, org, split, team = claim.pool, claim.org, claim.split, claim.team
        lease = secrets.token_hex(8) if team is None else f"{secrets.token_hex(8)}/{team}"
        index = self._index_key(pool)
        args: list[str | int | float] = [now, lease, self.lease_ttl]
        if split is None:
            return [self._claims_key(pool, org), index], [*args, claim.reservation, org], "c", lease
        own = self._group_key(pool, org, split.group, False)
        in_org = self._group_key(pool, org, split.group, True)
        every = [
            self._group_key(pool, org, g, b) for g in ("", *split.groups) for b in (False, True)
        ]
        args.extend((split.reservation, claim.reservation, org))
        return [own, in_org, index, *every], args, "t", lease

    def _claimed(
        self, reply: Any, pool: str, org: str, lease: str, split: Split | None, now: float
    ) -> Claim:
        """The claim a claim script's ``reply`` says was made, its slot kept refreshed."""
        group = None if split is None else split.group
        outcome, held = int(reply[0]), int(reply[1])
        if outcome == 0:
            return Claim(pool, org, False, held, None, now, group=group)
        taken = Claim(pool, org, True, held, lease, now, group=group, in_org=outcome == 2)
        self._held[lease] = ((self._slot_key(taken), lease), (self._index_key(pool), org))
        return taken

    @staticmethod
    def _borrowing(pool: str, org: str, split: Split | None, now: float) -> Claim:
        group = None if split is None else split.group
        return Claim(pool, org, False, 0, None, now, group=group)

    async def release(self, claim: Claim) -> None:
        if claim.lease is None:
            return
        self._held.pop(claim.lease, None)  # no longer refreshed, even if Redis is down now
        key, lease = self._slot_key(claim), claim.lease
        await self._completed(self._pooled(lambda: self._redis.zrem(key, lease)))

    async def _completed(self, work: Coroutine[Any, Any, Any]) -> Any:
        """``work`` run as a task of its own, completed even when the caller is cancelled
        (``aclose`` waits for what cancelled callers left)."""
        call = asyncio.ensure_future(work)
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            self._pending.add(call)
            call.add_done_callback(self._finished)
            raise

    async def in_flight(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, int]:
        reply = await self._in_flight_call(pool, now, groups, per_team=False)
        return {reply[i].decode(): int(reply[i + 1]) for i in range(0, len(reply), 2)}

    async def team_in_flight(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None = None
    ) -> dict[str, dict[str, int]]:
        reply = await self._in_flight_call(pool, now, groups, per_team=True)
        counts: dict[str, dict[str, int]] = {}
        for i in range(0, len(reply), 3):
            counts.setdefault(reply[i].decode(), {})[reply[i + 1].decode()] = int(reply[i + 2])
        return counts

    async def _in_flight_call(
        self, pool: str, now: float, groups: Mapping[str, Sequence[str]] | None, per_team: bool
    ) -> Any:
        args: list[str | int | float] = [repr(now), self._slots_prefix(pool), int(per_team)]
        for org, teams in (groups or {}).items():
            args.extend((org, len(teams), *teams))
        return await self._call(self._in_flight, [self._index_key(pool)], args)

    async def team_usage(
        self, pool: str, now: float, half_life: float
    ) -> dict[str, dict[str, float]]:
        key = self._team_usage_key(pool)
        stored: dict[bytes, bytes] = await self._pooled(lambda: self._redis.hgetall(key))
        usage: dict[str, dict[str, float]] = {}
        for field, record in stored.items():
            org, _, team = field.decode().partition(":")
            value, at = (float(part) for part in record.split())
            teams = usage.setdefault(_unescape(org), {})
            teams[_unescape(team)] = decay(value, max(0.0, now - at), half_life)
        return usage

    async def usage(self, pool: str, now: float, half_life: float) -> dict[str, float]:
        key = self._usage_key(pool)
        stored: dict[bytes, bytes] = await self._pooled(lambda: self._redis.hgetall(key))
        usage: dict[str, float] = {}
        for org, record in stored.items():
            value, at = (float(part) for part in record.split())
            usage[org.decode()] = decay(value, max(0.0, now - at), half_life)
        return usage

    async def charge(
        self,
        pool: str,
        org: str,
        cost_units: float,
        now: float,
        half_life: float,
        team: str | None = None,
    ) -> None:
        keys, args = self._charge_call(UsageCharge(pool, org, cost_units, half_life, team), now)
        await self._call(self._charge, keys, args)

    def _charge_call(
        self, charge: UsageCharge, now: float
    ) -> tuple[list[str], list[str | int | float]]:
        """The keys and arguments of charge.lua for ``charge`` (``ValueError`` if invalid)."""
        cost_units, half_life = charge.cost_units, charge.half_life
        if not cost_units >= 0 or not math.isfinite(cost_units):
            raise ValueError(f"a charge must be finite and non-negative, got {cost_units!r}")
        if not half_life > 0:
            raise ValueError(f"half_life must be positive, got {half_life!r}")
        keep_ms = math.ceil(min(_USAGE_KEEP_HALF_LIVES * half_life, _USAGE_KEEP_MAX) * 1000)
        args: list[str | int | float] = [charge.org, float(cost_units), now]
        args.extend((float(half_life), keep_ms))
        keys = [self._usage_key(charge.pool)]
        if charge.team is not None:
            keys.append(self._team_usage_key(charge.pool))
            args.append(f"{_escape(charge.org)}:{_escape(charge.team)}")
        return keys, args

    async def aclose(self) -> None:
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._scripts.aclose()
        await close_client(self._redis)

    def _give_back(
        self,
        reply: Any,
        lease_id: str,
        charges: Sequence[Charge],
        now: float,
        slot: tuple[ClaimRequest, str] | None = None,
    ) -> None:
        """Settle, untouched, an acquisition whose caller was cancelled before its reply
        (``ReplyThenCancelled.reply``), and release the slot it claimed with it (``slot``:
        the claim asked, its lease id)."""
        if isinstance(reply, BaseException):  # an error reply: the script charged nothing
            return
        released = None
        if slot is not None:
            if len(reply) > 1:
                asked, lease = slot
                released = self._claimed(reply[1], asked.pool, asked.org, lease, asked.split, now)
            reply = reply[0]
        if int(reply[0]) != 0:
            return
        orphan = Lease(lease_id, tuple(charges), now, _mark_of(charges, map(int, reply[1:])))
        # Its request never ran: every charge is given back, not only the slot (an empty
        # ``actual`` would leave the windows, the day's counts and budgets charged).
        nothing = {c.key: 0 for c in charges if type(c) is WindowCharge or type(c) is PeriodCharge}
        undo = asyncio.ensure_future(self.settle(orphan, nothing, now, release=released))
        self._pending.add(undo)
        undo.add_done_callback(self._finished)

    def _unclaim(
        self, reply: Any, pool: str, org: str, lease: str, group: str | None, now: float
    ) -> None:
        """Release the slot of a claim whose caller was cancelled before its reply."""
        if isinstance(reply, BaseException) or int(reply[0]) == 0:
            return
        in_org = int(reply[0]) == 2
        orphan = Claim(pool, org, True, 0, lease, now, group=group, in_org=in_org)
        self._pending.add(undo := asyncio.ensure_future(self.release(orphan)))
        undo.add_done_callback(self._finished)

    def _finished(self, call: asyncio.Future[Any]) -> None:
        self._pending.discard(call)
        if not call.cancelled() and call.exception() is not None:
            log.warning(
                "limits state: work left by a cancelled caller failed: %s", call.exception()
            )

    def _key(self, charge: Charge) -> str:
        return self.prefix + charge.key

    def _slots_prefix(self, pool: str) -> str:
        """What every ``_claims_key`` of ``pool`` starts with (in_flight.lua appends the org)."""
        return f"{self.prefix}fairshare:inflight:{_escape(pool)}:"

    def _claims_key(self, pool: str, org: str) -> str:
        return self._slots_prefix(pool) + _escape(org)

    def _group_key(self, pool: str, org: str, group: str, in_org: bool) -> str:
        """A group's slot set: the organisation's own (group ``""``, not in-org: today's
        key), a team's sub-reservation (``:t:``), or in-org seats (``:b:``).
        in_flight.lua builds the same names: keep them in step."""
        base = self._claims_key(pool, org)
        if in_org:
            return f"{base}:b:{_escape(group)}"
        return base if group == "" else f"{base}:t:{_escape(group)}"

    def _slot_key(self, claim: Claim) -> str:
        return self._group_key(claim.pool, claim.org, claim.group or "", claim.in_org)

    def _team_usage_key(self, pool: str) -> str:
        return f"{self.prefix}fairshare:teamusage:{_escape(pool)}"

    def _index_key(self, pool: str) -> str:
        return f"{self.prefix}fairshare:orgs:{_escape(pool)}"

    def _usage_key(self, pool: str) -> str:
        return f"{self.prefix}fairshare:usage:{_escape(pool)}"

    async def _call(
        self, script: Script, keys: list[str], args: list[str | int | float], hold: bool = False
    ) -> Any:
        """Run one script under the timeout and the breaker, pipelined on the store's
        connection (``fairgate.state.scripts``): at once when a place among the calls in
        flight is free, else after the wait for one (``_wait``). ``hold``: a caller
        cancelled once the script is sent learns what it did, from the
        ``ReplyThenCancelled`` raised after its reply, within the timeout. Cancelled
        before (waiting for a place, connecting), it raises ``CancelledError`` and the
        script was not sent; cancelled after without ``hold``, the script runs and its
        reply is dropped."""
        scripts = self._scripts
        if scripts.room():
            scripts.take()
        else:
            await self._wait()
        run = scripts.run
        ran = False  # ``run`` takes the place over (free again once the reply is read)

        def command(deadline: Deadline) -> Awaitable[Any]:
            nonlocal ran
            ran = True
            return run(script, keys, args, deadline, hold)

        try:
            if not scripts.connected:
                await self._guarded(lambda _: scripts.connect())
            return await self._guarded(command)
        finally:
            if not ran:
                scripts.give_back()

    async def _wait(self) -> None:
        """A place among the calls in flight, handed over within ``wait_timeout``: every
        one is taken by this gateway's own calls, which says nothing about Redis's
        health."""
        try:
            async with asyncio.timeout(self._wait_timeout):
                return await self._scripts.wait()
        except TimeoutError:
            raise StateUnavailable(
                f"no place for a Redis call of this gateway came free within"
                f" {self._wait_timeout:g}s (every one taken by other requests)"
            ) from None

    async def eviction(self) -> str | None:
        """How Redis may evict this store's keys, from ``INFO memory``: ``maxmemory`` set
        and a ``maxmemory-policy`` other than ``noeviction`` (every key here has an expiry,
        so ``volatile-*`` policies take them too); None when it cannot (no memory bound,
        or writes refused when full). An evicted window, period or slot counter starts
        again from zero. Raises ``StateUnavailable``."""
        info: dict[str, Any] = await self._pooled(lambda: self._redis.info("memory"))
        bound, policy = int(info.get("maxmemory", 0) or 0), str(info.get("maxmemory_policy"))
        if bound <= 0 or policy == "noeviction":
            return None
        return f"maxmemory {bound} bytes, maxmemory-policy {policy}"

    async def warn_of_eviction(self) -> None:
        """Log a warning when Redis may evict the counters (``eviction``): limits and
        budgets would then be overshot without an error anywhere. Never raises."""
        try:
            eviction = await self.eviction()
        except StateUnavailable as exc:
            log.warning("state: could not read Redis's eviction policy (%s)", exc)
            return
        if eviction is not None:
            log.warning(
                "state: Redis may evict the gateway's counters (%s): an evicted rate window,"
                " budget or in-flight count starts again from zero, so limits and budgets"
                " can be overshot; set maxmemory-policy noeviction (writes are then refused"
                " when Redis is full, and requests fail closed) or maxmemory 0",
                eviction,
            )

    @property
    def client(self) -> Redis:
        """The connection pool's client, for siblings sharing it (``state.owners``)."""
        return self._redis

    async def guarded(self, command: Callable[[], Awaitable[Any]]) -> Any:
        """One command of a sibling on the pooled client (``client``), under this store's
        wait for a connection, timeout and breaker (``_pooled``)."""
        return await self._pooled(command)

    async def _pooled(self, command: Callable[[], Awaitable[Any]]) -> Any:
        """``command`` on a pooled connection: first a turn among this gateway's pooled
        commands, handed over within ``wait_timeout`` (its own congestion: not under
        ``timeout``, not counted by the breaker, refused alone), then ``_guarded``."""
        room = self._pooled_room
        if room.locked():
            try:
                async with asyncio.timeout(self._wait_timeout):
                    await room.acquire()
            except TimeoutError:
                raise StateUnavailable(
                    f"no Redis connection of this gateway came free within"
                    f" {self._wait_timeout:g}s (every one taken by other calls)"
                ) from None
        else:
            await room.acquire()  # free: returns at once
        try:
            return await self._guarded(lambda _: command())
        finally:
            room.release()

    async def _guarded(self, command: Callable[[Deadline], Awaitable[Any]]) -> Any:
        """Run one Redis command under the timeout (``Deadline``: a reply the loop has read
        by the turn after it is in time, handed to ``command``) and the breaker; the
        failure policy of this store."""
        if not self._breaker.allow():
            raise StateUnavailable("Redis is unavailable (breaker open after repeated failures)")
        deadline = Deadline(self._timeout)
        try:
            result = await command(deadline)
        except asyncio.CancelledError:
            if not deadline.expired():
                raise
            self._breaker.failure()
            raise StateUnavailable(
                f"Redis call failed: TimeoutError: no answer within {self._timeout:g}s"
            ) from None
        except ResponseError as exc:
            # Redis answered (an error reply: a script refusing its arguments, a command
            # refused under maxmemory): a failure of this call, not of Redis's availability,
            # so it opens no breaker shared by every tenant (a request's own data could)
            raise StateUnavailable(f"Redis call failed: {type(exc).__name__}: {exc}") from exc
        except (RedisError, OSError) as exc:
            self._breaker.failure()
            if isinstance(exc, ConnectionError | OSError):
                # on its own: awaited here, this call's deadline could still cancel it
                # and escape as a bare cancellation
                self._pending.add(dropping := asyncio.ensure_future(self._drop_idle()))
                dropping.add_done_callback(self._finished)
            raise StateUnavailable(f"Redis call failed: {type(exc).__name__}: {exc}") from exc
        finally:
            deadline.close()
        self._breaker.success()
        return result

    async def _drop_idle(self) -> None:
        """Close every idle pooled connection after a connection failure: after a Redis
        restart each of them is dead, and would otherwise fail one request each as it
        comes round (each a 503), long after Redis is back. They reconnect when next used."""
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(self._timeout):
                await self._scripts.disconnect_idle()
                await self._redis.connection_pool.disconnect(inuse_connections=False)


def _escape(name: str) -> str:  # in_flight.lua has a copy: keep them in step
    if "%" not in name and ":" not in name:  # most names: nothing to replace
        return name
    return name.replace("%", "%25").replace(":", "%3A")


def _unescape(name: str) -> str:
    return name.replace("%3A", ":").replace("%25", "%")


# The per-charge fields of acquire.lua and settle.lua, six a charge, appended in one loop
# each: a call per charge here (a helper, ``isinstance``, ``max``) was ~200 of the
# gateway's Python calls a request on Redis (11 charges a request, in and out).


def _acquire_fields(charges: Sequence[Charge], args: list[str | int | float]) -> None:
    """acquire.lua's fields of ``charges``, appended to ``args``."""
    for c in charges:
        if type(c) is WindowCharge:
            args += ("w", c.amount, c.limit, c.window, c.granules, 0)
        elif type(c) is PeriodCharge:
            args += ("p", c.amount, c.limit, c.resets_at, c.keep_until, "1" if c.overdraft else "0")
        elif type(c) is InFlightCharge:
            args += ("f", 1, c.limit, 0, 0, 0)
        else:
            args += ("m", 0, 0, 0, 0, 0)


def _mark_of(charges: Sequence[Charge], totals: Iterable[int]) -> int:
    """The value acquire.lua found in the charges' mark (0: no mark among them)."""
    return next((t for c, t in zip(charges, totals, strict=True) if type(c) is MarkCharge), 0)


def _settle_fields(
    lease: Lease, actual: Mapping[str, int], now: float, args: list[str | int | float]
) -> None:
    """settle.lua's fields of ``lease``'s charges (``actual``: the true amounts known),
    appended to ``args``."""
    charged_at = lease.charged_at
    shape: tuple[float, int] | None = None  # the window shape its buckets were found for
    charged = current = expiry = 0
    for c in lease.charges:
        if type(c) is WindowCharge:
            delta = actual[c.key] - c.amount if c.key in actual else 0
            if shape != (c.window, c.granules):  # most windows share one shape
                shape = (c.window, c.granules)
                charged, current = bucket_of(charged_at, *shape), bucket_of(now, *shape)
                expiry = _window_ms(c)
            refund, excess = (-delta, 0) if delta < 0 else (0, delta)
            args += ("w", charged, refund, current, excess, expiry)
        elif type(c) is PeriodCharge:
            charged_now = actual.get(c.key, c.amount)  # the estimate stands when unknown
            args += ("p", charged_now - c.amount, charged_now, 0, 0, 0)
        elif type(c) is InFlightCharge:
            args += ("f", 0, 0, 0, 0, 0)
        else:
            args += ("m", lease.mark, 0, 0, 0, 0)
