"""The requests in flight, by key: cut when the credential they came with stops being valid.

    in_flight = InFlight(authenticate)            # the identify stage's own check
    in_flight.add(ex, authorization)              # the pipeline, once identified: a dict insert
    in_flight.remove(ex)                          # its ``finally``: a dict delete
    in_flight.changed(changes)                    # the change watcher, after the key cache drops
    task = asyncio.create_task(in_flight.run())   # re-checks and cuts, until cancelled

A key revoked, a team, project or organisation disabled, a person revoked, an
exchanged key evicted: each writes the store's access-change feed, which every
gateway process reads (``fairgate.auth.changes``) and which drops the key cache's
entries of the subject, so that new requests are refused. ``changed`` notes the
keys of the requests in flight that a change names (a key id; a team, project or
organisation by the principal the request was admitted as). ``run`` then checks
each distinct credential of those keys again through the same ``authenticate`` a new
request goes through (its cache entry dropped: the store answers), and cuts every
request of a refused credential: ``ex.revoked`` is set to the refusal (the 401 or
403 a new request with it gets) and the request's task cancelled. The pipeline
answers the client with it (an error envelope before any byte, an SSE error event
mid-stream), cancelling the task abandons the upstream attempt (its connection is
closed: the engine aborts the sequence), and the request is recorded with outcome
``revoked``, charged by the usual rule (``proxy.reservation``).

A check the gateway cannot make (the store down: 503) cuts nothing and is made
again ``RETRY`` seconds later, as long as the request runs. The check is no
caller's attempt (``fairgate.auth.authenticator.rechecking``): it counts no failed
authentication and is never held back by the client network's failure limits, so a
caller cannot keep a revoked key's request running by failing logins first. A check that admits the
credential (a change that left it valid) cuts nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from fairgate.auth.authenticator import rechecking
from fairgate.core.errors import Forbidden, GatewayError, Unauthorized
from fairgate.core.principal import Principal
from fairgate.proxy.exchange import Exchange

__all__ = ["RETRY", "InFlight"]

log = logging.getLogger("fairgate.proxy")

RETRY = 1.0
"""Seconds before a check the gateway could not make is made again."""

Authenticate = Callable[[bytes | None, str], Awaitable[Principal]]


class Change(Protocol):
    """What the feed says changed: ``kind`` (key | team | project | org) ``subject``."""

    @property
    def kind(self) -> str: ...
    @property
    def subject(self) -> str: ...


_Held = tuple[Exchange, "asyncio.Task[object] | None", bytes | None]


_RECENT = 4096
"""Changes kept for the requests being identified while they were applied."""


def _names(kind: str, subject: str, p: Principal) -> bool:
    """Whether a change of ``kind`` ``subject`` may concern a request of ``p`` (an unknown
    kind concerns every request)."""
    if kind == "key":
        return p.key_id == subject
    if kind == "team":
        return p.team == subject
    if kind == "org":
        return p.org == subject
    if kind == "project":
        return f"{p.team}/{p.project}" == subject
    return True


class InFlight:
    """The requests in flight of this process by key id, and the check that cuts them.

    ``authenticate`` is the identify stage's check of a credential (raises
    ``Unauthorized``/``Forbidden`` for a refused one). ``add`` and ``remove`` cost
    one dict operation each; ``changed`` is proportional to the requests in flight
    for a team, project or organisation change, constant for a key change.
    """

    def __init__(self, authenticate: Authenticate) -> None:
        self._authenticate = authenticate
        self._by_key: dict[str, dict[int, _Held]] = {}
        self._suspects: set[str] = set()
        self._woken = asyncio.Event()
        # the changes applied lately, numbered: a request identified while one was applied
        # (its lookup began before, it is held after) is checked against them (``add``)
        self._seq = 0
        self._recent: deque[tuple[int, str, str]] = deque(maxlen=_RECENT)

    def mark(self) -> int:
        """The number of the last change applied: taken before a request is identified,
        handed to ``add``."""
        return self._seq

    def __len__(self) -> int:
        return sum(len(held) for held in self._by_key.values())

    def add(self, ex: Exchange, authorization: bytes | None, since: int | None = None) -> None:
        """Hold ``ex`` (identified: ``ex.principal`` set), run by the current task, under
        its key until ``remove``. ``since``: ``mark()`` before it was identified; a change
        applied since that names it (its credential looked up before the change, held
        after it, so ``changed`` missed it) has it checked too."""
        principal = ex.principal
        assert principal is not None
        held = self._by_key.get(principal.key_id)
        if held is None:
            held = self._by_key[principal.key_id] = {}
        held[id(ex)] = (ex, asyncio.current_task(), authorization)
        if since is not None and since != self._seq:
            self._caught_up(principal, since)

    def _caught_up(self, p: Principal, since: int) -> None:
        recent = self._recent
        if not recent or recent[0][0] > since + 1:
            named = True  # changes were dropped from the window: check it to be sure
        else:
            named = any(seq > since and _names(kind, subject, p) for seq, kind, subject in recent)
        if named:
            self._suspects.add(p.key_id)
            self._woken.set()

    def remove(self, ex: Exchange) -> None:
        """Forget ``ex`` (safe when it was never added)."""
        principal = ex.principal
        if principal is None:
            return
        held = self._by_key.get(principal.key_id)
        if held is not None and held.pop(id(ex), None) is not None and not held:
            del self._by_key[principal.key_id]

    def changed(self, changes: Iterable[Change]) -> None:
        """Note the keys in flight that ``changes`` name; ``run`` checks them (an unknown
        kind names every key)."""
        for change in changes:
            self._seq += 1
            self._recent.append((self._seq, change.kind, change.subject))
            self._suspects.update(self._named(change.kind, change.subject))
        if self._suspects:
            self._woken.set()

    def _named(self, kind: str, subject: str) -> list[str]:
        if kind == "key":
            return [subject] if subject in self._by_key else []
        if kind not in ("team", "org", "project"):
            return list(self._by_key)
        named = []
        for key_id, held in self._by_key.items():
            for ex, _task, _auth in held.values():
                p = ex.principal
                assert p is not None
                if _names(kind, subject, p):
                    named.append(key_id)
                    break
        return named

    async def run(self) -> None:
        """Check the keys ``changed`` noted and cut what is refused, until cancelled."""
        while True:
            await self._woken.wait()
            self._woken.clear()
            if await self.check():
                await asyncio.sleep(RETRY)
                self._woken.set()

    async def check(self) -> int:
        """Check every key noted so far once; how many could not be checked (noted again)."""
        suspects, self._suspects = self._suspects, set()
        checks: dict[tuple[bytes | None, str], str] = {}
        for key_id in suspects:
            for ex, _task, authorization in self._by_key.get(key_id, {}).values():
                checks.setdefault((authorization, ex.client), key_id)
        if not checks:
            return 0
        verdicts = await asyncio.gather(
            *(self._verdict(authorization, client) for authorization, client in checks)
        )
        unchecked = 0
        for ((authorization, client), key_id), verdict in zip(
            checks.items(), verdicts, strict=True
        ):
            if verdict is None:
                continue
            if isinstance(verdict, GatewayError):
                self._cut(key_id, authorization, client, verdict)
            else:
                self._suspects.add(key_id)
                unchecked += 1
        return unchecked

    async def _verdict(
        self, authorization: bytes | None, client: str
    ) -> GatewayError | bool | None:
        """The refusal of a credential (401/403), None when it is still valid, True when
        it could not be checked."""
        try:
            with rechecking():  # not the client's attempt: no failure limit, none counted
                await self._authenticate(authorization, client)
        except (Unauthorized, Forbidden) as refusal:
            return refusal
        except GatewayError as exc:  # 503 (store): not a verdict
            log.warning("requests in flight not checked after an access change: %s", exc.code)
            return True
        except Exception:
            log.exception("requests in flight not checked after an access change")
            return True
        return None

    def _cut(
        self, key_id: str, authorization: bytes | None, client: str, refusal: GatewayError
    ) -> None:
        cut: Sequence[_Held] = [
            h
            for h in self._by_key.get(key_id, {}).values()
            if h[2] == authorization and h[0].client == client
        ]
        for ex, task, _auth in cut:
            if ex.complete or ex.revoked is not None or ex.preempted is not None or task is None:
                continue  # settling, or already being cut
            ex.revoked = refusal
            task.cancel()
            log.warning(
                "request %s cut: key %s is no longer valid (%s)",
                ex.request_id,
                key_id,
                refusal.code,
            )
