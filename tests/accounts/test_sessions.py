"""Sessions in the store: 256-bit ids kept as hashes, both timeouts, one query, dead at once."""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from accounts.conftest import OPERATOR
from fairgate.accounts import COOKIE, AccountsParts
from fairgate.store import Store
from fairgate.store.tables import web_sessions
from store.backends import FakeClock

EMAIL = "alice@example.org"
PASSWORD = "correct horse battery"


async def _signed_in(parts: AccountsParts) -> str:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    opened = await parts.accounts.sign_in(EMAIL, PASSWORD, network="192.0.2.7")
    return opened.cookie_value


def test_the_cookie_has_the_host_prefix() -> None:
    assert COOKIE == "__Host-fairgate-session"


async def test_a_session_resolves_to_its_active_account(parts: AccountsParts) -> None:
    cookie = await _signed_in(parts)
    view = await parts.sessions.resolve(cookie)
    assert view is not None and view.kind == "account" and view.account is not None
    assert (view.account.email, view.account.state, view.account.team) == (
        EMAIL,
        "active",
        "lab-nlp",
    )


async def test_the_store_holds_only_hashes_of_the_id_and_the_csrf_token(
    parts: AccountsParts, store: Store
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    opened = await parts.accounts.sign_in(EMAIL, PASSWORD, network="192.0.2.7")
    assert len(opened.cookie_value) == 43  # 256 bits, base64url
    async with store.read() as conn:
        rows = (await conn.execute(select(web_sessions))).all()
    assert len(rows) == 1
    stored = b"".join(v for v in rows[0] if isinstance(v, bytes))
    assert opened.cookie_value.encode() not in stored
    assert opened.csrf_token.encode() not in stored
    assert rows[0].id_sha256 == hashlib.sha256(opened.cookie_value.encode()).digest()


async def test_every_sign_in_opens_a_new_session_id(parts: AccountsParts) -> None:
    first = await _signed_in(parts)
    second = await parts.accounts.sign_in(EMAIL, PASSWORD, network="192.0.2.7")
    assert first != second.cookie_value


async def test_unknown_and_malformed_cookies_resolve_to_nothing(parts: AccountsParts) -> None:
    cookie = await _signed_in(parts)
    assert await parts.sessions.resolve(None) is None
    assert await parts.sessions.resolve("") is None
    assert await parts.sessions.resolve(cookie[:-1] + ("A" if cookie[-1] != "A" else "B")) is None
    assert await parts.sessions.resolve(cookie + "x") is None
    assert await parts.sessions.resolve("' OR 1=1 --") is None


async def test_sign_out_ends_the_session_at_once(parts: AccountsParts) -> None:
    cookie = await _signed_in(parts)
    await parts.sessions.close(cookie)
    assert await parts.sessions.resolve(cookie) is None


async def test_an_idle_session_dies_and_a_used_one_lives(
    parts: AccountsParts, clock: FakeClock
) -> None:
    idle = 30 * 60
    used = await _signed_in(parts)
    unused = (await parts.accounts.sign_in(EMAIL, PASSWORD, network="192.0.2.7")).cookie_value
    for _ in range(4):  # 4 × 20 min of use
        clock.advance(idle * 2 / 3)
        assert await parts.sessions.resolve(used) is not None
    assert await parts.sessions.resolve(unused) is None


async def test_a_session_dies_at_its_absolute_lifetime_however_used(
    parts: AccountsParts, clock: FakeClock
) -> None:
    cookie = await _signed_in(parts)
    for _ in range(12 * 3):  # every 20 minutes for 12 hours
        assert await parts.sessions.resolve(cookie) is not None
        clock.advance(20 * 60)
    assert await parts.sessions.resolve(cookie) is None


async def test_suspension_kills_the_session_at_once(parts: AccountsParts) -> None:
    cookie = await _signed_in(parts)
    await parts.accounts.suspend(OPERATOR, EMAIL)
    assert await parts.sessions.resolve(cookie) is None


async def test_a_suspended_state_alone_is_enough_to_refuse_the_session(
    parts: AccountsParts, store: Store
) -> None:
    """The resolving query itself checks the state (not only suspend's session cleanup)."""
    from fairgate.store.tables import accounts

    cookie = await _signed_in(parts)
    async with store.write() as conn:
        await conn.execute(accounts.update().values(state="suspended"))
    assert await parts.sessions.resolve(cookie) is None


async def test_the_csrf_token_matches_only_its_own_session(parts: AccountsParts) -> None:
    cookie = await _signed_in(parts)
    other = (await parts.accounts.sign_in(EMAIL, PASSWORD, network="192.0.2.7")).cookie_value
    view = await parts.sessions.resolve(cookie)
    assert view is not None
    assert parts.sessions.csrf_ok(view, parts.sessions.csrf_token(cookie))
    assert not parts.sessions.csrf_ok(view, parts.sessions.csrf_token(other))
    assert not parts.sessions.csrf_ok(view, None)
    assert not parts.sessions.csrf_ok(view, "")
    assert not parts.sessions.csrf_ok(view, "0" * 64)


async def test_an_admin_session_dies_with_its_user(parts: AccountsParts) -> None:
    tenancy = parts.accounts._tenancy
    user = await tenancy.users.create(OPERATOR, "ops-admin")
    opened = await parts.sessions.open_admin("user:ops-admin", user.id)
    master = await parts.sessions.open_admin("master-key", None)
    view = await parts.sessions.resolve(opened.cookie_value)
    assert view is not None and (view.kind, view.actor_name, view.user_id) == (
        "admin",
        "user:ops-admin",
        user.id,
    )
    await tenancy.users.disable(OPERATOR, "ops-admin")
    assert await parts.sessions.resolve(opened.cookie_value) is None
    assert await parts.sessions.resolve(master.cookie_value) is not None


async def test_pruning_deletes_only_dead_sessions(parts: AccountsParts, clock: FakeClock) -> None:
    old = await _signed_in(parts)
    clock.advance(31 * 60)
    fresh = (await parts.accounts.sign_in(EMAIL, PASSWORD, network="192.0.2.7")).cookie_value
    assert await parts.sessions.prune() == 1
    assert await parts.sessions.resolve(old) is None
    assert await parts.sessions.resolve(fresh) is not None


async def test_the_gateway_s_pruning_task_deletes_dead_sessions(
    parts: AccountsParts, clock: FakeClock, store: Store
) -> None:
    import asyncio

    await _signed_in(parts)
    clock.advance(13 * 3600)
    task = asyncio.ensure_future(parts.prune_sessions(every=0.01))
    try:
        for _ in range(200):
            async with store.read() as conn:
                if not (await conn.execute(select(web_sessions))).all():
                    break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
    async with store.read() as conn:
        assert (await conn.execute(select(web_sessions))).all() == []
