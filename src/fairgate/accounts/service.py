"""``Accounts``: sign-up, sign-in and the operator's approve / list / suspend / delete.

    accounts = Accounts(store, tenancy, sessions, verifier, guesses, notifier, clock)
    await accounts.sign_up("alice@example.org", "a long passphrase")   # None, always
    opened = await accounts.sign_in("alice@example.org", "…", network=peer)
    await accounts.approve(Actor.operator("ops"), "alice@example.org", team="lab-nlp")

The enumeration and timing rules, in code below:
- ``sign_up`` answers None for a new and for a known address alike, and hashes
  the password in both cases (the same work); the alert is sent off the
  request path.
- ``sign_in`` runs one real argon2 verification whether or not the account
  exists (the dummy hash), then checks the account's state only after the
  password matched; every refusal is the same :class:`SignInRefused`.
- Each attempt is charged per address and per network *before* the
  verification (only a sign-in that succeeds gives it back), so a locked address
  costs no CPU and concurrent attempts cannot slip past the limit.
- An account whose user is disabled (``fairgate users disable``, SCIM ``active:
  false``) is refused like a suspended one: at sign-in, on its sessions, and in
  :meth:`Accounts.actor`.

An approved account is a tenancy user named after its address, bound to the
team (``member`` unless told otherwise) through ``Tenancy.users`` and
``Tenancy.roles``: the admin API's rules apply to the approver. Suspending
disables that user and ends the account's sessions at once; its keys keep
working until revoked (they belong to the team, as with any disabled user).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

from fairgate.accounts.account import Account
from fairgate.accounts.emails import normalise_email
from fairgate.accounts.errors import SignInRefused, VerifierBusy
from fairgate.accounts.guesses import GuessCounter
from fairgate.accounts.notices import SignUpNotifier
from fairgate.accounts.passwords import check_password
from fairgate.accounts.sessions import OpenedSession, Sessions
from fairgate.accounts.verifier import Verifier
from fairgate.core.clock import Clock
from fairgate.core.errors import BadRequest, Forbidden, NotFound
from fairgate.store import Store, StoreConflict, from_unix, role_bindings, web_sessions
from fairgate.store import accounts as rows
from fairgate.store.accounts import AccountRow
from fairgate.tenancy import Actor, Conflict, Holding, Role, Tenancy

__all__ = ["TEAM_ROLES", "Accounts"]

log = logging.getLogger(__name__)

TEAM_ROLES = (Role.MEMBER.value, Role.VIEWER.value, Role.TEAM_ADMIN.value)
"""The roles an approval may bind on the team."""


class Accounts:
    """The accounts service over one store; see the module docstring for its rules."""

    def __init__(
        self,
        store: Store,
        tenancy: Tenancy,
        sessions: Sessions,
        verifier: Verifier,
        guesses: GuessCounter,
        notifier: SignUpNotifier,
        clock: Clock,
    ) -> None:
        self._store = store
        self._tenancy = tenancy
        self._sessions = sessions
        self._verifier = verifier
        self._guesses = guesses
        self._notifier = notifier
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    async def sign_up(self, email: str, password: str, *, network: str | None = None) -> None:
        """Create a pending account, or do nothing when the address has one: the caller
        cannot tell which. EmailRejected, PasswordRejected, VerifierBusy; with ``network``
        (the client's address), TooManyGuesses past ``accounts.signups_per_network``."""
        address = normalise_email(email)
        check_password(password)
        if network is not None:
            await self._guesses.signup(network)  # before the lookup: same for any address
        hashed = await self._verifier.hash(password)  # also for a known address: same work
        try:
            async with self._store.write() as conn:
                account_id = await rows.insert_account(
                    conn, email=address, password_hash=hashed, now=self._now()
                )
                row = await rows.by_id(conn, account_id)
        except StoreConflict:
            return None
        assert row is not None
        self._spawn(self._notifier.pending_sign_up(Account.of(row)))
        return None

    async def sign_in(self, email: str, password: str, *, network: str) -> OpenedSession:
        """A new session for an active account, its user enabled, whose password matches.

        SignInRefused for a wrong password, no account, a pending or a suspended
        account, or one whose user is disabled (one answer, the attempt counted);
        TooManyGuesses when the address or the network is at its limit; VerifierBusy
        when the verification pool is full.
        """
        try:
            address = normalise_email(email)
        except BadRequest:
            address = email.strip().lower()[:256]  # still counted, still verified
        ticket = await self._guesses.attempt(address, network)
        async with self._store.read() as conn:
            row = await rows.by_email(conn, address)
        try:
            verdict = await self._verifier.verify(
                None if row is None else row.password_hash, password
            )
        except VerifierBusy:
            await self._guesses.refund(ticket)  # nothing was tried
            raise
        if row is None or not verdict.ok or row.state != "active" or row.user_disabled:
            # The attempt stays counted whatever the reason: giving it back for a right
            # password on an account that may not sign in would tell the guesser which
            # password was right (the limit arrives one attempt later), and, after a
            # sign-up with a password of their own, whether the address had an account.
            raise SignInRefused()
        await self._guesses.refund(ticket)
        if verdict.rehash:
            await self._rehash(row, password)
        return await self._sessions.open_account(row.id)

    async def approve(
        self, actor: Actor, email: str, *, team: str, role: str = "member"
    ) -> Account:
        """Bind a pending (or suspended) account to ``team`` with ``role`` and activate it.

        The user named after the address is created in the team's organisation and
        granted the role through the tenancy services (the actor's rights apply).
        A suspended account re-approved leaves its former team: every role its user
        holds on the team it was approved into before, other than ``role`` on
        ``team``, is revoked first (before the user is enabled again), so an account
        moved to another team, or given another role, keeps no access it had there.
        NotFound for an unknown address or team, Conflict for an active account or a
        user of that name that is not the account's, Forbidden beyond the actor's rights.
        """
        if role not in TEAM_ROLES:
            raise BadRequest(f"an account's role is one of {', '.join(TEAM_ROLES)}")
        row = await self._find(email)
        if row.state == "active":
            raise Conflict(f"{row.email} is already approved", code="account_active")
        found = await self._tenancy.teams.get(actor, team)
        if found.disabled_at is not None:
            raise NotFound(f"no team {team!r}", code="team_not_found")
        user_id = row.user_id
        if user_id is None:
            try:
                user = await self._tenancy.users.create(actor, row.email, org=found.org)
            except Conflict:
                raise Conflict(
                    f"a user named {row.email} exists and is not this account's: "
                    "rename or remove that user first",
                    code="user_exists",
                ) from None
            user_id = user.id
            async with self._store.write() as conn:
                await rows.set_state(
                    conn, row.id, state=row.state, now=self._now(), user_id=user_id
                )
        else:
            await self._leave_team(actor, row, keep=(role, found.id))
            await self._tenancy.users.enable(actor, row.email)
        with contextlib.suppress(Conflict):  # re-approved into a team it is bound to already
            await self._tenancy.roles.grant(actor, user=row.email, role=role, team=team)
        async with self._store.write() as conn:
            await rows.set_state(
                conn, row.id, state="active", now=self._now(), user_id=user_id, team_id=found.id
            )
            approved = await rows.by_id(conn, row.id)
        assert approved is not None
        log.info("account %s approved into team %s as %s by %s", row.id, team, role, actor.name)
        return Account.of(approved)

    async def list(self, *, pending: bool = False) -> list[Account]:
        """Every account (or the pending ones), oldest first."""
        async with self._store.read() as conn:
            found = await rows.list_accounts(conn, pending=pending)
        return [Account.of(row) for row in found]

    async def suspend(self, actor: Actor, email: str) -> Account:
        """Suspend an account: its sessions end at once, sign-in is refused, its user is
        disabled (the actor needs the admin API's right to disable that user; a pending
        account, with no user yet, needs proxy_admin)."""
        row = await self._find(email)
        await self._may_remove(actor, row)
        async with self._store.write() as conn:
            await rows.set_state(conn, row.id, state="suspended", now=self._now())
            await web_sessions.close_all(conn, row.id)
            suspended = await rows.by_id(conn, row.id)
        assert suspended is not None
        log.info("account %s suspended by %s", row.id, actor.name)
        return Account.of(suspended)

    async def delete(self, actor: Actor, email: str) -> None:
        """Delete an account and its sessions; its user, if approved, stays disabled (users
        are never deleted, so usage records keep their names). Rights as ``suspend``."""
        row = await self._find(email)
        await self._may_remove(actor, row)
        async with self._store.write() as conn:
            await web_sessions.close_all(conn, row.id)
            await rows.delete_account(conn, row.id)
        log.info("account %s deleted by %s", row.id, actor.name)

    async def actor(self, account: Account) -> Actor:
        """The tenancy actor an approved account acts as (``user:EMAIL`` with its bindings),
        read afresh each time so a removed binding, a suspension or a disabled user applies
        at once (Forbidden then)."""
        if account.user_id is None:
            raise Forbidden("the account is not approved", code="account_pending")
        async with self._store.read() as conn:
            row = await rows.by_id(conn, account.id)
            if row is None or row.state != "active" or row.user_disabled:
                raise Forbidden(
                    "the account is suspended or its user disabled", code="account_disabled"
                )
            bound = await role_bindings.bindings_of(conn, account.user_id)
        holds = tuple(Holding(Role(b.role), b.scope_kind, b.scope_id) for b in bound)
        return Actor(name=f"user:{account.email}", user_id=account.user_id, holds=holds)

    async def close(self) -> None:
        """Wait for the alerts still being sent."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _find(self, email: str) -> AccountRow:
        address = normalise_email(email)
        async with self._store.read() as conn:
            row = await rows.by_email(conn, address)
        if row is None:
            raise NotFound(f"no account for {address}", code="account_not_found")
        return row

    async def _leave_team(self, actor: Actor, row: AccountRow, *, keep: tuple[str, int]) -> None:
        """Revoke the roles the account's user holds on its former team (``row.team_id``),
        all but ``keep`` (role, team id): a re-approval moves the account, it does not
        add a team to the one it had. Each revocation is the admin API's (its rights,
        its ``role.revoked`` audit event)."""
        if row.team_id is None:
            return
        for binding in await self._tenancy.roles.list(actor, user=row.email):
            if binding.scope_kind != "team" or binding.scope_id != row.team_id:
                continue
            if (binding.role, binding.scope_id) == keep:
                continue
            await self._tenancy.roles.revoke(
                actor, user=row.email, role=binding.role, team=binding.scope
            )

    async def _may_remove(self, actor: Actor, row: AccountRow) -> None:
        if row.user_id is not None:
            await self._tenancy.users.disable(actor, row.email)
        elif not actor.root_admin:
            raise Forbidden("a pending account is removed by a proxy admin", code="forbidden")

    async def _rehash(self, row: AccountRow, password: str) -> None:
        """Store a hash with today's parameters (best effort: sign-in goes on if busy)."""
        try:
            new = await self._verifier.hash(password)
        except VerifierBusy:
            log.warning("account %s: rehash skipped (verifier busy)", row.id)
            return
        async with self._store.write() as conn:
            await rows.set_hash(conn, row.id, row.password_hash, new)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("pending sign-up alert failed: %s", task.exception())

    def _now(self) -> datetime:
        return from_unix(self._clock.wall())
