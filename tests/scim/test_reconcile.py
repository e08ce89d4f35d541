"""Reconciliation over a real store (SQLite and PostgreSQL): what SCIM holds becomes users and
roles; only SCIM's own grants are ever taken away; a renamed user is a new user, the old name
disabled (a case-only rename renames the user in place); a mapped team created late is
granted at the next reconciliation."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert

from fairgate.accounts import Sessions, SsoBinding
from fairgate.config.scim import Scim, ScimGroup
from fairgate.config.secrets import SecretRef
from fairgate.scim.reconcile import Reconciler
from fairgate.store import Store, admin_tokens, audit_events, from_unix, role_bindings, scim, users
from fairgate.store.tables import role_bindings as bindings_table
from fairgate.store.tables import users as users_table
from fairgate.tenancy import Actor, Tenancy
from store.backends import FakeClock

OP = Actor.operator("tests")
CONFIG = Scim(
    token_file=SecretRef(path="unused"),
    groups={"Physics": ScimGroup(team="phys"), "Late": ScimGroup(team="late", role="viewer")},
)


async def _put(store: Store, rid: str, kind: str, name: str, **body: Any) -> None:
    now = from_unix(0)
    async with store.write() as conn:
        old = await scim.get_resource(conn, kind, rid)
        active = body.pop("active", True)
        if old is None:
            await scim.insert_resource(
                conn, resource_id=rid, kind=kind, name=name, active=active, body=body, now=now
            )
        else:
            await scim.update_resource(
                conn,
                resource_id=rid,
                kind=kind,
                name=name,
                active=active,
                body=body,
                version=old.version,
                now=now,
            )


async def _variant(store: Store, name: str) -> None:
    """A user whose name another holds in another case, as a store made before migration
    0021 could hold one: without a ``name_key``."""
    async with store.write() as conn:
        await conn.execute(insert(users_table).values(name=name, created_at=from_unix(2)))


async def _reconcile(store: Store) -> None:
    async with store.write(exclusive=True) as conn:
        await Reconciler(CONFIG).reconcile(conn, from_unix(1))


async def _roles(store: Store, name: str) -> set[tuple[str, str | None]]:
    async with store.read() as conn:
        return {(b.role, b.scope) for b in await role_bindings.list_bindings(conn, user=name)}


async def _enabled(store: Store, name: str) -> bool:
    async with store.read() as conn:
        user = await users.by_name(conn, name)
    assert user is not None
    return user.disabled_at is None


async def test_only_scims_own_grants_are_taken_away(store: Store, tenancy: Tenancy) -> None:
    await tenancy.orgs.create(OP, "o")
    await tenancy.teams.create(OP, name="phys", org="o")
    await _put(store, "u1", "User", "ann")
    await _put(store, "g1", "Group", "physics", members=[{"value": "u1"}])
    await _reconcile(store)
    assert await _roles(store, "ann") == {("member", "phys")}
    await tenancy.roles.grant(OP, user="ann", role="viewer", team="phys")

    await _put(store, "g1", "Group", "physics", members=[])
    await _reconcile(store)
    assert await _roles(store, "ann") == {("viewer", "phys")}

    # A binding of SCIM's removed by hand comes back at the next reconciliation.
    await _put(store, "g1", "Group", "physics", members=[{"value": "u1"}])
    await _reconcile(store)
    async with store.write() as conn:
        await conn.execute(delete(bindings_table).where(bindings_table.c.role == "member"))
    await _reconcile(store)
    assert await _roles(store, "ann") == {("viewer", "phys"), ("member", "phys")}


async def test_the_same_pair_granted_again_by_hand_stays_when_scim_takes_its_own_away(
    store: Store, tenancy: Tenancy
) -> None:
    await tenancy.orgs.create(OP, "o")
    await tenancy.teams.create(OP, name="phys", org="o")
    await _put(store, "u1", "User", "ann")
    await _put(store, "g1", "Group", "physics", members=[{"value": "u1"}])
    await _reconcile(store)
    # An administrator takes SCIM's binding over: revoked by hand, granted by hand.
    await tenancy.roles.revoke(OP, user="ann", role="member", team="phys")
    await tenancy.roles.grant(OP, user="ann", role="member", team="phys")
    await _reconcile(store)
    await _put(store, "g1", "Group", "physics", members=[])
    await _reconcile(store)
    assert await _roles(store, "ann") == {("member", "phys")}


async def test_a_renamed_user_is_a_new_user_and_the_old_name_is_disabled(
    store: Store, tenancy: Tenancy
) -> None:
    await _put(store, "u1", "User", "old-name")
    await _reconcile(store)
    await _put(store, "u1", "User", "new-name")
    await _reconcile(store)
    assert not await _enabled(store, "old-name")
    assert await _enabled(store, "new-name")


async def test_a_mapped_team_made_late_is_granted_at_the_next_reconciliation(
    store: Store, tenancy: Tenancy
) -> None:
    await _put(store, "u1", "User", "bea")
    await _put(store, "g1", "Group", "Late", members=[{"value": "u1"}])
    async with store.write(exclusive=True) as conn:
        report = await Reconciler(CONFIG).reconcile(conn, from_unix(1))
        assert await Reconciler(CONFIG).missing_teams(conn) == [
            ("late", "late"),
            ("physics", "phys"),
        ]
    assert report.unknown_teams == {"late"}
    await tenancy.orgs.create(OP, "o")
    await tenancy.teams.create(OP, name="late", org="o")
    await _reconcile(store)
    assert await _roles(store, "bea") == {("viewer", "late")}
    async with store.read() as conn:
        assert await Reconciler(CONFIG).missing_teams(conn) == [("physics", "phys")]


async def test_deactivation_deletes_an_sso_session_opened_before_the_user_existed(
    store: Store, tenancy: Tenancy, clock: FakeClock
) -> None:
    """An SSO session whose person had no store user at sign-in (claims' roles only) is
    deleted when SCIM deactivates that name, not merely refused while the user is disabled:
    activating the user again must not bring a session (perhaps a stolen cookie) back."""
    await tenancy.orgs.create(OP, "o")
    sessions = Sessions(store, idle=3600.0, lifetime=8 * 3600.0, clock=clock)
    opened = await sessions.open_sso(
        "sso:ann",
        None,
        roles=(SsoBinding(role="org_admin", org="o", team=None),),
        id_token_hint="h.p.s",
        lifetime=8 * 3600.0,
    )
    assert await sessions.resolve(opened.cookie_value) is not None
    await _put(store, "u1", "User", "Ann")  # SCIM's userName is not case-exact
    await _reconcile(store)
    assert await sessions.resolve(opened.cookie_value) is not None  # a new user ends nothing
    await _put(store, "u1", "User", "Ann", active=False)
    await _reconcile(store)
    await _put(store, "u1", "User", "Ann", active=True)
    await _reconcile(store)
    assert await _enabled(store, "Ann")
    assert await sessions.resolve(opened.cookie_value) is None


async def test_a_user_disabled_by_hand_stays_disabled_through_scim_writes(
    store: Store, tenancy: Tenancy
) -> None:
    """An operator disables a compromised provisioned user by hand; the provider still
    holds them active. The next SCIM write (for anybody) must not enable them again; an
    enable by hand, or SCIM's own deactivation undone by SCIM, does."""
    await _put(store, "u1", "User", "eve")
    await _reconcile(store)
    await tenancy.users.disable(OP, "eve")
    await _put(store, "u2", "User", "bob")  # an unrelated write
    await _reconcile(store)
    assert not await _enabled(store, "eve")
    await tenancy.users.enable(OP, "eve")
    await _reconcile(store)
    assert await _enabled(store, "eve")
    await _put(store, "u1", "User", "eve", active=False)
    await _reconcile(store)
    assert not await _enabled(store, "eve")
    await _put(store, "u1", "User", "eve", active=True)
    await _reconcile(store)
    assert await _enabled(store, "eve")


async def test_a_case_only_rename_keeps_the_user_and_a_disable_by_hand(
    store: Store, tenancy: Tenancy
) -> None:
    """The provider changes only the case of a userName: the gateway user is renamed in
    place (same id, nothing disabled); one an administrator disabled by hand under the old
    spelling stays disabled under the new one."""
    await _put(store, "u1", "User", "ada")
    await _put(store, "u2", "User", "eve")
    await _reconcile(store)
    async with store.read() as conn:
        ada = await users.by_name(conn, "ada")
    await _put(store, "u1", "User", "Ada")
    await _reconcile(store)
    async with store.read() as conn:
        renamed = await users.by_name(conn, "Ada")
        assert await users.by_name(conn, "ada") is None
        assert not await users.disabled_namesake(conn, "ada")
    assert ada is not None and renamed is not None and renamed.id == ada.id
    assert renamed.disabled_at is None

    await tenancy.users.disable(OP, "eve")
    await _put(store, "u2", "User", "Eve")
    await _reconcile(store)
    assert not await _enabled(store, "Eve")


async def test_a_namesake_in_another_case_does_not_undo_a_disable_by_hand(
    store: Store, tenancy: Tenancy
) -> None:
    """SCIM adopts ``Bob`` beside a hand-made ``bob`` (case variants a store made before
    migration 0021 may hold). An administrator disables ``Bob`` and enables ``bob``;
    matching the audit log without case took the latest of the two, and SCIM enabled
    ``Bob`` again."""
    await tenancy.users.create(OP, "bob")
    await _variant(store, "Bob")
    await _put(store, "u1", "User", "Bob")
    await _reconcile(store)
    await tenancy.users.disable(OP, "Bob")
    await tenancy.users.disable(OP, "bob")
    await tenancy.users.enable(OP, "bob")
    await _reconcile(store)
    assert not await _enabled(store, "Bob")
    assert await _enabled(store, "bob")


async def test_a_later_holder_of_an_earlier_name_does_not_decide_for_the_renamed_user(
    store: Store, tenancy: Tenancy
) -> None:
    """``ada`` renamed ``Ada`` by SCIM; a newcomer ``ada`` (stored as a store of an earlier
    version let the admin API make it) is disabled then enabled by hand: those events are
    about the newcomer, not about ``Ada``, disabled by hand."""
    await _put(store, "u1", "User", "ada")
    await _reconcile(store)
    await _put(store, "u1", "User", "Ada")
    await _reconcile(store)
    await tenancy.users.disable(OP, "Ada")
    await _variant(store, "ada")
    await tenancy.users.disable(OP, "ada")
    await tenancy.users.enable(OP, "ada")
    await _reconcile(store)
    assert not await _enabled(store, "Ada")


async def test_deactivation_audits_each_admin_token_it_revokes(
    store: Store, tenancy: Tenancy
) -> None:
    """SCIM's disable revokes the user's admin tokens in the store; each revocation gets its
    own ``admin_token.revoked`` event, as the same revocation through the admin API does, so
    a token's trail does not end at its creation."""
    await _put(store, "u1", "User", "ann")
    await _reconcile(store)
    made = [await tenancy.admin_tokens.create(OP, user="ann") for _ in range(2)]
    await _put(store, "u1", "User", "ann", active=False)
    await _reconcile(store)
    await _reconcile(store)  # a second pass revokes nothing more and audits nothing more
    async with store.read() as conn:
        events = await audit_events.list_events(conn, action="admin_token.revoked")
        left = [t for t in await admin_tokens.list_tokens(conn, user="ann") if not t.revoked_at]
    assert left == []
    assert sorted(e.target for e in events) == sorted(f"admin_token:{m.token.id}" for m in made)
    assert all(e.actor == "system:scim" and e.detail["user"] == "ann" for e in events)


async def test_scim_provisions_no_case_variant_of_a_user_made_by_hand(
    store: Store, tenancy: Tenancy
) -> None:
    """SCIM created ``Bob`` beside a hand-made ``bob``: two users of one name in any case,
    which the admin API refuses. It is now left unprovisioned (and the store would refuse
    it), the hand-made user untouched and not adopted."""
    await tenancy.users.create(OP, "bob")
    await _put(store, "u1", "User", "Bob")
    await _reconcile(store)
    async with store.read() as conn:
        assert await users.by_name(conn, "Bob") is None
        assert [u.name for u in await users.list_users(conn)] == ["bob"]
        assert await scim.managed_users(conn) == {}
