"""The Accounts service: enumeration and timing rules, approval through tenancy, suspension."""

from __future__ import annotations

import pytest
from argon2 import extract_parameters
from sqlalchemy import select

from accounts.conftest import OPERATOR, SETTINGS
from fairgate.accounts import (
    AccountsParts,
    EmailRejected,
    PasswordRejected,
    SignInRefused,
    TooManyGuesses,
    Verdict,
    build_accounts,
)
from fairgate.core.errors import BadRequest, Forbidden, NotFound
from fairgate.state import MemoryCounterStore
from fairgate.store import Store
from fairgate.store.tables import accounts as accounts_table
from fairgate.store.tables import web_sessions
from fairgate.tenancy import Actor, Conflict, Tenancy
from store.backends import FakeClock

EMAIL = "alice@example.org"
PASSWORD = "correct horse battery"
PEER = "192.0.2.7"


async def _stored(store: Store) -> list[tuple[str, str, str]]:
    async with store.read() as conn:
        rows = await conn.execute(
            select(accounts_table.c.email, accounts_table.c.state, accounts_table.c.password_hash)
        )
        return [tuple(row) for row in rows]


async def test_sign_up_answers_the_same_for_a_new_and_a_known_address(
    parts: AccountsParts, store: Store
) -> None:
    verifier = parts.verifier
    assert await parts.accounts.sign_up(EMAIL, PASSWORD) is None
    first = await _stored(store)
    assert await parts.accounts.sign_up(EMAIL, "another long password") is None
    assert await parts.accounts.sign_up("Alice@Example.ORG", "yet another password") is None
    assert await _stored(store) == first  # the known address's password is untouched
    assert first[0][:2] == (EMAIL, "pending")
    assert verifier.pending == 0


async def test_sign_up_hashes_a_known_address_s_password_too(parts: AccountsParts) -> None:
    """Same work for a new and a known address: a hash each (counted by the pool's threads)."""
    calls: list[str] = []
    real = parts.verifier.hash

    async def counting(password: str) -> str:
        calls.append("hash")
        return await real(password)

    parts.verifier.hash = counting  # type: ignore[method-assign]
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    assert calls == ["hash", "hash"]


async def test_the_password_is_stored_as_an_argon2id_hash(
    parts: AccountsParts, store: Store
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    [(_, _, stored)] = await _stored(store)
    assert PASSWORD not in stored
    assert extract_parameters(stored).memory_cost >= 19456


@pytest.mark.parametrize(
    "email", ["", "alice", "alice@", "@example.org", "alice@example", "a b@example.org",
              "alice@exa_mple.org", "x" * 120 + "@example.org", "alice@example.org\n"[:-1] + "\x00"]
)  # fmt: skip
async def test_sign_up_rejects_what_is_not_an_address(parts: AccountsParts, email: str) -> None:
    with pytest.raises(EmailRejected):
        await parts.accounts.sign_up(email, PASSWORD)


async def test_sign_up_rejects_a_short_password(parts: AccountsParts) -> None:
    with pytest.raises(PasswordRejected):
        await parts.accounts.sign_up(EMAIL, "short")


async def test_sign_in_for_a_missing_account_still_runs_a_real_verification(
    parts: AccountsParts,
) -> None:
    before = parts.verifier.verifications
    with pytest.raises(SignInRefused) as missing:
        await parts.accounts.sign_in("nobody@example.org", PASSWORD, network=PEER)
    assert parts.verifier.verifications == before + 1
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    with pytest.raises(SignInRefused) as wrong:
        await parts.accounts.sign_in(EMAIL, "not the password", network=PEER)
    assert parts.verifier.verifications == before + 2
    assert (missing.value.message, missing.value.code, missing.value.status) == (
        wrong.value.message,
        wrong.value.code,
        wrong.value.status,
    )


async def test_a_pending_account_is_refused_only_after_its_password_is_checked(
    parts: AccountsParts,
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    before = parts.verifier.verifications
    with pytest.raises(SignInRefused) as right:
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    with pytest.raises(SignInRefused) as wrong:
        await parts.accounts.sign_in(EMAIL, "not the password", network=PEER)
    assert parts.verifier.verifications == before + 2
    assert right.value.message == wrong.value.message


async def test_an_approved_account_signs_in_and_is_a_member_of_its_team(
    parts: AccountsParts, tenancy: Tenancy
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    account = await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    assert (account.state, account.team) == ("active", "lab-nlp")
    opened = await parts.accounts.sign_in("ALICE@example.org", PASSWORD, network=PEER)
    assert opened.cookie_value
    [binding] = await tenancy.roles.list(OPERATOR, user=EMAIL)
    assert (binding.role, binding.scope) == ("member", "lab-nlp")
    actor = await parts.accounts.actor(account)
    assert actor.name == f"user:{EMAIL}" and actor.member_teams
    key = await tenancy.keys.create(actor, team="lab-nlp")
    assert key.key.owner == EMAIL
    with pytest.raises(NotFound):  # every rule of the admin API applies: not its team
        await tenancy.keys.create(actor, team="lab-cv")


async def test_approval_refuses_an_unknown_address_a_wrong_team_and_a_second_time(
    parts: AccountsParts,
) -> None:
    with pytest.raises(NotFound):
        await parts.accounts.approve(OPERATOR, "nobody@example.org", team="lab-nlp")
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    with pytest.raises(NotFound):
        await parts.accounts.approve(OPERATOR, EMAIL, team="no-such-team")
    with pytest.raises(BadRequest):
        await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp", role="proxy_admin")
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    with pytest.raises(Conflict):
        await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")


async def test_signing_up_as_an_existing_user_s_name_never_inherits_their_roles(
    parts: AccountsParts, tenancy: Tenancy
) -> None:
    await tenancy.users.create(OPERATOR, "boss@example.org")
    await tenancy.roles.grant(OPERATOR, user="boss@example.org", role="proxy_admin")
    await parts.accounts.sign_up("boss@example.org", PASSWORD)
    with pytest.raises(Conflict, match="exists"):
        await parts.accounts.approve(OPERATOR, "boss@example.org", team="lab-nlp")
    [account] = await parts.accounts.list()
    assert (account.state, account.user_id) == ("pending", None)


async def test_an_approver_needs_the_admin_api_s_rights(
    parts: AccountsParts, tenancy: Tenancy
) -> None:
    await tenancy.users.create(OPERATOR, "member-only")
    await tenancy.roles.grant(OPERATOR, user="member-only", role="member", team="lab-nlp")
    token = await tenancy.admin_tokens.create(OPERATOR, user="member-only")
    actor = await tenancy.admin_tokens.authenticate(token.secret)
    assert actor is not None
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    with pytest.raises(Forbidden):
        await parts.accounts.approve(actor, EMAIL, team="lab-nlp")
    with pytest.raises(Forbidden):
        await parts.accounts.suspend(actor, EMAIL)


async def test_list_shows_pending_accounts_and_never_a_hash(parts: AccountsParts) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.sign_up("bob@example.org", PASSWORD)
    await parts.accounts.approve(OPERATOR, "bob@example.org", team="lab-cv")
    assert [a.email for a in await parts.accounts.list(pending=True)] == [EMAIL]
    listed = await parts.accounts.list()
    assert {a.email: a.state for a in listed} == {EMAIL: "pending", "bob@example.org": "active"}
    assert not any("argon2" in repr(a) for a in listed)


async def test_a_suspended_account_cannot_sign_in_and_approval_brings_it_back(
    parts: AccountsParts,
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    suspended = await parts.accounts.suspend(OPERATOR, EMAIL)
    assert suspended.state == "suspended"
    with pytest.raises(SignInRefused):
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    again = await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    assert again.state == "active"
    assert await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)


async def test_delete_removes_the_account_and_its_sessions(
    parts: AccountsParts, store: Store
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    opened = await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    await parts.accounts.delete(OPERATOR, EMAIL)
    assert await parts.sessions.resolve(opened.cookie_value) is None
    assert await _stored(store) == []
    with pytest.raises(SignInRefused):
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    with pytest.raises(NotFound):
        await parts.accounts.delete(OPERATOR, EMAIL)


async def test_a_pending_account_is_deleted_only_by_a_proxy_admin(parts: AccountsParts) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    with pytest.raises(Forbidden):
        await parts.accounts.delete(Actor(name="user:x", user_id=99), EMAIL)
    await parts.accounts.delete(OPERATOR, EMAIL)
    assert await parts.accounts.list() == []


async def test_sign_in_rehashes_when_the_parameters_were_raised(
    store: Store, tenancy: Tenancy, clock: FakeClock, parts: AccountsParts
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    stronger = build_accounts(
        SETTINGS.model_copy(update={"argon2_memory_kib": 32768, "argon2_iterations": 3}),
        store,
        tenancy,
        clock,
        state=MemoryCounterStore(),
    )
    try:
        await stronger.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    finally:
        await stronger.aclose()
    [(_, _, stored)] = await _stored(store)
    params = extract_parameters(stored)
    assert (params.memory_cost, params.time_cost) == (32768, 3)
    await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)  # the new hash verifies


async def test_guesses_are_limited_per_address_from_any_network(parts: AccountsParts) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    for n in range(SETTINGS.guesses_per_address):
        with pytest.raises(SignInRefused):
            await parts.accounts.sign_in(EMAIL, "wrong password!", network=f"198.51.100.{n}")
    before = parts.verifier.verifications
    with pytest.raises(TooManyGuesses) as limited:
        await parts.accounts.sign_in(EMAIL, PASSWORD, network="203.0.113.9")
    assert limited.value.retry_after > 0
    assert parts.verifier.verifications == before  # a locked address costs no argon2


async def test_one_network_guessing_many_addresses_meets_its_ceiling(
    parts: AccountsParts,
) -> None:
    for n in range(SETTINGS.guesses_per_network):
        with pytest.raises(SignInRefused):
            await parts.accounts.sign_in(f"user{n}@example.org", PASSWORD, network="2001:db8::1")
    with pytest.raises(TooManyGuesses):  # another address in the same /64
        await parts.accounts.sign_in("fresh@example.org", PASSWORD, network="2001:db8::ffff")
    with pytest.raises(SignInRefused):  # another network is still heard
        await parts.accounts.sign_in("fresh@example.org", PASSWORD, network="2001:db8:1::1")


async def test_the_guess_limit_slides_away(parts: AccountsParts, clock: FakeClock) -> None:
    for _ in range(SETTINGS.guesses_per_address):
        with pytest.raises(SignInRefused):
            await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    with pytest.raises(TooManyGuesses) as limited:
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    clock.advance(limited.value.retry_after + 1)
    with pytest.raises(SignInRefused):
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)


async def test_a_suspended_account_is_checked_after_its_password_too(
    parts: AccountsParts,
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    await parts.accounts.suspend(OPERATOR, EMAIL)
    before = parts.verifier.verifications
    with pytest.raises(SignInRefused) as right:
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    with pytest.raises(SignInRefused) as missing:
        await parts.accounts.sign_in("nobody@example.org", PASSWORD, network=PEER)
    assert parts.verifier.verifications == before + 2
    assert (right.value.message, right.value.code) == (missing.value.message, missing.value.code)


async def test_a_right_password_gives_its_guess_back(parts: AccountsParts) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    for _ in range(SETTINGS.guesses_per_address * 3):
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)


async def test_sign_ups_are_limited_per_network_alike_for_new_and_known_addresses(
    parts: AccountsParts, store: Store
) -> None:
    limit = SETTINGS.signups_per_network
    for n in range(limit):
        await parts.accounts.sign_up(f"user{n % 2}@example.org", PASSWORD, network="192.0.2.9")
    for email in ("user0@example.org", "fresh@example.org"):  # known and new: one answer
        with pytest.raises(TooManyGuesses):
            await parts.accounts.sign_up(email, PASSWORD, network="192.0.2.9")
    assert len(await _stored(store)) == 2
    await parts.accounts.sign_up("fresh@example.org", PASSWORD, network="198.51.100.1")
    assert len(await _stored(store)) == 3


async def test_an_account_whose_user_is_disabled_cannot_sign_in_hold_a_session_or_act(
    parts: AccountsParts, tenancy: Tenancy
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    account = await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    opened = await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    await tenancy.users.disable(OPERATOR, EMAIL)  # as `fairgate users disable` or SCIM
    assert await parts.sessions.resolve(opened.cookie_value) is None
    with pytest.raises(SignInRefused):
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    # A sign-in that raced the disable (its password verified before) opens no session,
    # so none comes back at enable; the account cannot act through a view read before.
    with pytest.raises(SignInRefused):
        await parts.sessions.open_account(account.id)
    with pytest.raises(Forbidden):
        await parts.accounts.actor(account)
    await tenancy.users.enable(OPERATOR, EMAIL)
    assert await parts.sessions.resolve(opened.cookie_value) is None  # deleted at disable
    assert await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    assert (await parts.accounts.actor(account)).member_teams


@pytest.mark.parametrize("state", ["pending", "suspended", "user disabled", "no account"])
async def test_a_right_password_that_cannot_sign_in_stays_counted_as_a_guess(
    parts: AccountsParts, tenancy: Tenancy, state: str
) -> None:
    # Giving the guess back for a right password would move the limit one attempt later
    # for that password alone: the guesser would learn it, and, having signed the address
    # up with a password of their own, whether it had an account before.
    if state != "no account":
        await parts.accounts.sign_up(EMAIL, PASSWORD)
    if state in ("suspended", "user disabled"):
        await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    if state == "suspended":
        await parts.accounts.suspend(OPERATOR, EMAIL)
    if state == "user disabled":
        await tenancy.users.disable(OPERATOR, EMAIL)
    for _ in range(SETTINGS.guesses_per_address):
        with pytest.raises(SignInRefused):
            await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)
    with pytest.raises(TooManyGuesses):
        await parts.accounts.sign_in(EMAIL, PASSWORD, network=PEER)


async def test_a_sign_in_racing_a_suspension_leaves_no_session_for_the_re_approval(
    parts: AccountsParts, store: Store
) -> None:
    """The suspension lands while the password is being verified: the sign-in read the
    account as active, but its session must not be written after the suspension deleted
    the others, or it would open again once the account is approved again."""
    accounts = parts.accounts
    await accounts.sign_up("ada@example.org", PASSWORD)
    await accounts.approve(OPERATOR, "ada@example.org", team="lab-nlp")
    real = parts.verifier.verify

    async def verify_then_suspend(stored: str | None, password: str) -> Verdict:
        verdict = await real(stored, password)
        await accounts.suspend(OPERATOR, "ada@example.org")
        return verdict

    parts.verifier.verify = verify_then_suspend  # type: ignore[method-assign]
    with pytest.raises(SignInRefused):
        await accounts.sign_in("ada@example.org", PASSWORD, network="10.0.0.1")
    parts.verifier.verify = real  # type: ignore[method-assign]
    await accounts.approve(OPERATOR, "ada@example.org", team="lab-nlp")
    async with store.read() as conn:  # no row was written
        assert (await conn.execute(select(web_sessions.c.id_sha256))).all() == []


async def test_re_approval_into_another_team_leaves_no_role_in_the_old_one(
    parts: AccountsParts, tenancy: Tenancy
) -> None:
    # the member binding on lab-nlp stayed: the person moved to lab-cv by an admin kept
    # making keys in the team they were moved out of
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp")
    await tenancy.roles.grant(OPERATOR, user=EMAIL, role="viewer", team="lab-nlp")
    await parts.accounts.suspend(OPERATOR, EMAIL)
    account = await parts.accounts.approve(OPERATOR, EMAIL, team="lab-cv")
    assert account.team == "lab-cv"
    bindings = await tenancy.roles.list(OPERATOR, user=EMAIL)
    assert [(b.role, b.scope) for b in bindings] == [("member", "lab-cv")]
    actor = await parts.accounts.actor(account)
    with pytest.raises(NotFound):
        await tenancy.keys.create(actor, team="lab-nlp")
    assert (await tenancy.keys.create(actor, team="lab-cv")).key.owner == EMAIL
    revoked = await tenancy.audit.list(OPERATOR, action="role.revoked")
    assert {e.detail["role"] for e in revoked if e.detail} == {"member", "viewer"}


async def test_re_approval_into_the_same_team_with_another_role_holds_only_that_role(
    parts: AccountsParts, tenancy: Tenancy
) -> None:
    await parts.accounts.sign_up(EMAIL, PASSWORD)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp", role="team_admin")
    await parts.accounts.suspend(OPERATOR, EMAIL)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp", role="member")
    bindings = await tenancy.roles.list(OPERATOR, user=EMAIL)
    assert [(b.role, b.scope) for b in bindings] == [("member", "lab-nlp")]
    # and the same role in the same team is kept, not revoked and granted again
    await parts.accounts.suspend(OPERATOR, EMAIL)
    await parts.accounts.approve(OPERATOR, EMAIL, team="lab-nlp", role="member")
    assert [b.role for b in await tenancy.roles.list(OPERATOR, user=EMAIL)] == ["member"]
