"""``AdminTokens.actor_of``: a user's actor rebuilt from the store's current bindings (what an
admin web session does on every request), on SQLite and PostgreSQL."""

from __future__ import annotations

from fairgate.tenancy import Role, Tenancy
from tenancy.world import OPERATOR, build_world


async def test_the_actor_follows_the_users_bindings_and_disabled_users_have_none(
    tenancy: Tenancy,
) -> None:
    world = await build_world(tenancy)
    olga = await world.actor("olga")
    assert olga.user_id is not None
    rebuilt = await tenancy.admin_tokens.actor_of(olga.user_id, remote="10.0.0.1")
    assert rebuilt is not None
    assert rebuilt.name == "user:olga" and rebuilt.remote == "10.0.0.1"
    assert set(rebuilt.holds) == set(olga.holds) and rebuilt.admin_orgs
    await tenancy.roles.revoke(OPERATOR, user="olga", role="org_admin", org="A")
    stripped = await tenancy.admin_tokens.actor_of(olga.user_id)
    assert stripped is not None and not stripped.ids(Role.ORG_ADMIN) and not stripped.holds
    await tenancy.users.disable(OPERATOR, "olga")
    assert await tenancy.admin_tokens.actor_of(olga.user_id) is None
    assert await tenancy.admin_tokens.actor_of(10**9) is None
