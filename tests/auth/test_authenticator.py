"""The Authenticator: cache first, failure limit before the store, one 401 for every refusal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time

import pytest

from fairgate.auth import Authenticator, FailureLimiter, sha256
from fairgate.auth.authenticator import rechecking
from fairgate.core.errors import GatewayError, RateLimited, ServiceUnavailable, Unauthorized
from fairgate.core.limits import Limits
from fairgate.core.principal import KeyRecord, Principal

from .conftest import START, ManualClock, MemoryDirectory, bearer, make_authenticator

ADDR = "192.0.2.10"


async def refusal(auth: Authenticator, header: bytes | None, addr: str = ADDR) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await auth.authenticate(header, addr)
    return info.value


def answer(error: GatewayError) -> tuple[int, bytes, tuple[tuple[bytes, bytes], ...]]:
    """What the client receives: status, body bytes, headers."""
    return error.status, error.body(), tuple(error.headers())


def random_key() -> str:
    """A well-formed key nobody issued (the shape of the gateway's own keys)."""
    return "fg-" + secrets.token_urlsafe(32)


async def test_a_valid_key_yields_its_principal_then_comes_from_the_cache(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, record = directory.add(
        key_id="k42",
        org="uni-a",
        team="nlp",
        project="p1",
        tags=("exp",),
        limits=Limits(rpm=10, tpm=2000),
    )
    auth, _ = make_authenticator(directory, clock)
    first = await auth.authenticate(bearer(secret), ADDR)
    assert first == Principal(
        key_id="k42",
        org="uni-a",
        team="nlp",
        project="p1",
        tags=("exp",),
        limits=Limits(rpm=10, tpm=2000),
    )
    for _ in range(100):
        assert await auth.authenticate(bearer(secret), ADDR) is first
    assert directory.calls[record.secret_sha256] == 1


async def test_the_bearer_scheme_is_case_insensitive(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, _ = directory.add()
    auth, _ = make_authenticator(directory, clock)
    principal = await auth.authenticate(b"bearer  " + secret.encode() + b" ", ADDR)
    assert principal.key_id == "k1"


async def test_every_refused_key_gets_the_same_401_bytes(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    revoked, _ = directory.add(revoked_at=START - 10)
    expired, _ = directory.add(expires_at=START - 1)
    rotated, record = directory.add()
    directory.rotate(record.key_id, grace_until=START - 1)  # grace already over
    auth, _ = make_authenticator(directory, clock, failures_per_minute=0)
    answers = {
        "unknown": answer(await refusal(auth, bearer(random_key()))),
        "revoked": answer(await refusal(auth, bearer(revoked))),
        "expired": answer(await refusal(auth, bearer(expired))),
        "old secret after grace": answer(await refusal(auth, bearer(rotated))),
        "malformed": answer(await refusal(auth, b"Bearer not-a-key")),
        "almost a key": answer(await refusal(auth, bearer(random_key()[:-1]))),
        "revoked, again (cached)": answer(await refusal(auth, bearer(revoked))),
    }
    assert len(set(answers.values())) == 1, answers
    status, body, headers = answers["unknown"]
    assert status == 401
    assert body == (
        b'{"error":{"message":"invalid API key","type":"authentication_error",'
        b'"code":"invalid_api_key"}}'
    )
    assert headers == ()


@pytest.mark.parametrize("header", [None, b"", b"Basic dXNlcjpwYXNz", b"Bearer", b"Bearer   "])
async def test_no_bearer_credential_is_a_401_that_says_so(
    directory: MemoryDirectory, clock: ManualClock, header: bytes | None
) -> None:
    auth, _ = make_authenticator(directory, clock)
    error = await refusal(auth, header)
    assert isinstance(error, Unauthorized)
    assert error.code == "missing_api_key"
    assert directory.calls.total() == 0


async def test_junk_never_reaches_the_store(directory: MemoryDirectory, clock: ManualClock) -> None:
    auth, _ = make_authenticator(directory, clock, failures_per_minute=1)
    for junk in (b"Bearer sk-abc", b"Bearer " + b"x" * 10_000, b"Bearer fg-\xff\xfe"):
        assert isinstance(await refusal(auth, junk), Unauthorized)
    assert directory.calls.total() == 0
    # junk is refused by shape alone and does not use up the network's failures
    assert isinstance(await refusal(auth, bearer(random_key())), Unauthorized)


async def test_a_spray_of_200000_random_keys_neither_evicts_a_valid_key_nor_repeats_lookups(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    # The failure limiter and the lookup ceiling are off: the cache must hold on its
    # own, as against a spray spread over many networks.
    secret, record = directory.add()
    auth, cache = make_authenticator(directory, clock, failures_per_minute=0, lookups_per_minute=0)
    await auth.authenticate(bearer(secret), ADDR)
    spray = [bearer(random_key()) for _ in range(200_000)]
    started = time.monotonic()
    for header in spray:
        with contextlib.suppress(Unauthorized):
            await auth.authenticate(header, ADDR)
    # the valid key was used only before the spray, so a shared LRU would have evicted it
    assert (await auth.authenticate(bearer(secret), ADDR)).key_id == record.key_id
    assert directory.calls[record.secret_sha256] == 1
    assert len(directory.calls) == 200_001
    assert max(directory.calls.values()) == 1  # at most one lookup per distinct key
    assert cache.sizes() == (1, 100_000)  # both maps within their bounds
    # the spray sent again (the part the miss cache still holds) never reaches the store
    before = directory.calls.total()
    for header in spray[-50_000:]:
        with pytest.raises(Unauthorized):
            await auth.authenticate(header, ADDR)
    assert directory.calls.total() == before
    assert time.monotonic() - started < 60  # pure Python over 250,000 digests


async def test_a_spray_from_one_network_uses_half_the_ceiling_and_spares_valid_keys(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    cached, _ = directory.add()
    expired, expired_record = directory.add()
    unseen, unseen_record = directory.add()
    auth, _ = make_authenticator(
        directory, clock, failures_per_minute=60, lookups_per_minute=200, ttl=5.0
    )
    clock.advance(1)
    await auth.authenticate(bearer(expired), ADDR)
    clock.advance(1)
    await auth.authenticate(bearer(cached), ADDR)
    outcomes = [(await refusal(auth, bearer(random_key()))).status for _ in range(300)]
    assert outcomes == [401] * 60 + [429] * 240
    # within its limit the network looked up 60 unknown keys; over it, only while less
    # than half of the ceiling (100) was used: the other 200 never reached the store
    assert directory.calls.total() == 2 + 100
    error = await refusal(auth, bearer(random_key()))
    assert isinstance(error, RateLimited)
    (name, value), *_ = error.headers()
    assert name == b"retry-after" and 1 <= int(value) <= 120
    assert b"rate_limit_error" in error.body()
    # a valid key in the cache passes from the blocked network ...
    assert (await auth.authenticate(bearer(cached), ADDR)).key_id == "k1"
    # ... and so does one it served before whose cache entry has expired (a store lookup)
    clock.advance(4.5)
    assert (await auth.authenticate(bearer(expired), ADDR)).key_id == expired_record.key_id
    assert directory.calls[expired_record.secret_sha256] == 2
    # a key this process never saw needs a slot: the failing networks' half is used up
    assert (await refusal(auth, bearer(unseen))).status == 429
    assert directory.calls[unseen_record.secret_sha256] == 0
    # another network still has the other half of the ceiling
    assert (await auth.authenticate(bearer(unseen), "192.0.2.11")).key_id == "k3"
    assert (await refusal(auth, bearer(random_key()), "192.0.2.12")).status == 401


async def test_a_valid_key_is_served_from_a_network_over_its_limit(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    # The spray of the issue: 60 random keys a minute from the one address every
    # client has behind a reverse proxy on the same host.
    unseen, record = directory.add()
    auth, _ = make_authenticator(directory, clock, failures_per_minute=60)
    for _ in range(120):
        await refusal(auth, bearer(random_key()), "127.0.0.1")
        clock.advance(0.5)
    assert (await refusal(auth, bearer(random_key()), "127.0.0.1")).status == 429
    assert (await auth.authenticate(bearer(unseen), "127.0.0.1")).key_id == record.key_id


async def test_a_spray_over_many_64s_of_one_48_stops_at_the_48_ceiling(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    failures = FailureLimiter(60, clock, ipv6_48=600, ipv6_32=6000)
    auth, _ = make_authenticator(directory, clock, failures=failures, lookups_per_minute=2000)
    # one failure from each of 3000 /64s of 2001:db8:5::/48: no /64 is near its own limit
    outcomes = [
        (await refusal(auth, bearer(random_key()), f"2001:db8:5:{n:x}::1")).status
        for n in range(3000)
    ]
    assert outcomes == [401] * 600 + [429] * 2400
    assert directory.calls.total() == 1000  # then half of the ceiling is used
    # a /64 of that /48 never seen before is over its limits too
    assert (await refusal(auth, bearer(random_key()), "2001:db8:5:ffff::9")).status == 429
    # another /48 of the same /32 is within its limits and has the other half
    assert (await refusal(auth, bearer(random_key()), "2001:db8:6::1")).status == 401


async def test_the_ceiling_bounds_the_lookups_of_a_spray_from_many_networks(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    known, record = directory.add()
    auth, _ = make_authenticator(directory, clock, failures_per_minute=60, lookups_per_minute=500)
    await auth.authenticate(bearer(known), "198.51.100.1")
    clock.advance(31)  # its cache entry expired
    # one failure from each of 2000 IPv4 addresses: each within its own limit
    outcomes = [
        (await refusal(auth, bearer(random_key()), f"10.{n // 256}.{n % 256}.1")).status
        for n in range(2000)
    ]
    assert outcomes == [401] * 500 + [429] * 1500
    assert directory.calls.total() == 1 + 500
    # the known valid key is looked up outside the ceiling
    assert (await auth.authenticate(bearer(known), "203.0.113.5")).key_id == record.key_id
    clock.advance(120)  # the sliding minute has freed the ceiling
    assert (await refusal(auth, bearer(random_key()), "203.0.113.5")).status == 401


async def test_a_store_failure_is_a_503_never_cached_never_counted(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, record = directory.add()
    auth, _ = make_authenticator(directory, clock, failures_per_minute=1)
    directory.down = True
    for _ in range(5):
        error = await refusal(auth, bearer(secret))
        assert isinstance(error, ServiceUnavailable)
        assert error.status == 503
        assert error.message == "authentication is temporarily unavailable"
    assert directory.calls[record.secret_sha256] == 5  # each one asked the store again
    directory.down = False
    assert (await auth.authenticate(bearer(secret), ADDR)).key_id == record.key_id
    # five failures of the store used none of the network's single allowed failure
    assert (await refusal(auth, bearer(random_key()))).status == 401
    assert (await refusal(auth, bearer(random_key()))).status == 429


async def test_an_unknown_key_is_remembered_as_a_miss(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    auth, _ = make_authenticator(directory, clock, failures_per_minute=0, ttl=30.0)
    header = bearer(random_key())
    for _ in range(10):
        await refusal(auth, header)
    assert directory.calls.total() == 1
    clock.advance(31)
    await refusal(auth, header)
    assert directory.calls.total() == 2


async def test_an_old_secret_works_until_the_grace_period_ends_then_gets_401(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    old, record = directory.add()
    auth, _ = make_authenticator(directory, clock, ttl=3600.0)
    assert (await auth.authenticate(bearer(old), ADDR)).key_id == record.key_id
    clock.advance(31)
    new = directory.rotate(record.key_id, grace_until=clock.wall() + 600)
    auth, _ = make_authenticator(directory, clock, ttl=3600.0)  # another process, cold cache
    by_new = await auth.authenticate(bearer(new), ADDR)
    by_old = await auth.authenticate(bearer(old), ADDR)
    assert by_new.key_id == by_old.key_id == record.key_id  # limits and reports continue
    clock.advance(599)
    assert (await auth.authenticate(bearer(old), ADDR)).key_id == record.key_id
    clock.advance(2)
    # the grace period is over: refused although still within the cache's TTL
    assert answer(await refusal(auth, bearer(old))) == answer(
        await refusal(auth, bearer(random_key()))
    )
    assert (await auth.authenticate(bearer(new), ADDR)).key_id == record.key_id


async def test_a_key_expires_on_time_even_while_cached(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, _ = directory.add(expires_at=START + 10)
    auth, _ = make_authenticator(directory, clock, ttl=3600.0)
    principal = await auth.authenticate(bearer(secret), ADDR)
    assert principal.expires_at == START + 10
    clock.advance(9.9)
    await auth.authenticate(bearer(secret), ADDR)
    clock.advance(0.2)
    assert (await refusal(auth, bearer(secret))).status == 401


async def test_a_revocation_reaches_other_processes_within_the_ttl_and_this_one_at_once(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, record = directory.add()
    here, here_cache = make_authenticator(directory, clock, ttl=30.0)
    there, _ = make_authenticator(directory, clock, ttl=30.0)
    await here.authenticate(bearer(secret), ADDR)
    await there.authenticate(bearer(secret), ADDR)
    clock.advance(10)
    directory.update(record.key_id, revoked_at=clock.wall())
    here_cache.invalidate(record.secret_sha256)  # what the admin API does in its own process
    assert (await refusal(here, bearer(secret))).status == 401
    assert (await there.authenticate(bearer(secret), ADDR)).key_id == record.key_id
    clock.advance(20.1)  # 30 s after `there` looked the key up
    assert (await refusal(there, bearer(secret))).status == 401


async def test_concurrent_requests_with_one_uncached_key_share_one_lookup(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, record = directory.add()
    auth, _ = make_authenticator(directory, clock)
    directory.gate = asyncio.Event()
    waiting = [asyncio.create_task(auth.authenticate(bearer(secret), ADDR)) for _ in range(20)]
    for _ in range(50):  # bounded: let every task reach the lookup
        await asyncio.sleep(0)
    waiting[5].cancel()  # one client goes away; the others keep the shared lookup
    directory.gate.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert isinstance(results[5], asyncio.CancelledError)
    del results[5]
    assert [r.key_id for r in results if isinstance(r, Principal)] == [record.key_id] * 19
    assert directory.calls[record.secret_sha256] == 1


async def test_when_the_request_that_asked_goes_away_the_others_ask_again(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, record = directory.add()
    auth, _ = make_authenticator(directory, clock)
    directory.gate = asyncio.Event()
    waiting = [asyncio.create_task(auth.authenticate(bearer(secret), ADDR)) for _ in range(5)]
    for _ in range(50):
        await asyncio.sleep(0)
    waiting[0].cancel()  # the first one is the one asking the directory
    for _ in range(50):
        await asyncio.sleep(0)
    directory.gate.set()
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert [r.key_id for r in results[1:] if isinstance(r, Principal)] == [record.key_id] * 4
    assert 2 <= directory.calls[record.secret_sha256] <= 5


async def test_the_principal_carries_the_allowlists_resolved_to_canonical_names(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    names = {"llama-3.3-70b": "llama-3.3-70b", "llama70b": "llama-3.3-70b", "mistral": "mistral"}
    secret, _ = directory.add(team_models=("llama70b", "mistral"), models=("llama-3.3-70b",))
    open_secret, _ = directory.add()
    auth, _ = make_authenticator(directory, clock, models=names)
    assert (await auth.authenticate(bearer(secret), ADDR)).models == frozenset({"llama-3.3-70b"})
    assert (await auth.authenticate(bearer(open_secret), ADDR)).models is None


async def test_logs_give_the_reason_and_never_the_secret(
    directory: MemoryDirectory, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    revoked, record = directory.add(revoked_at=START - 1)
    unknown = random_key()
    auth, _ = make_authenticator(directory, clock)
    with caplog.at_level(logging.DEBUG, logger="fairgate.auth"):
        await refusal(auth, bearer(revoked))
        await refusal(auth, bearer(unknown))
        directory.down = True
        await refusal(auth, bearer(random_key()))
    assert f"key {record.key_id} ({record.prefix}) is revoked" in caplog.text
    assert "unknown key" in caplog.text
    assert "did not answer" in caplog.text
    for secret in (revoked, unknown):
        assert secret not in caplog.text
        assert secret[3:20] not in caplog.text
    assert sha256(revoked).hex() not in caplog.text


class AnswersLate(MemoryDirectory):
    """Reads the record at once, hands it over only when ``delivered`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.delivered = asyncio.Event()

    async def find_key(
        self, secret_sha256: bytes, now: float, legacy: bytes | None = None
    ) -> KeyRecord | None:
        record = await super().find_key(secret_sha256, now, legacy)
        await self.delivered.wait()
        return record


async def test_a_lookup_that_races_a_revocation_is_not_cached_past_it(clock: ManualClock) -> None:
    """The store answered "valid" before the revocation committed; the watcher applied the
    change while the answer was on its way. The requests that asked are served (they
    started first), but the answer is not cached: the next request asks the store again."""
    directory = AnswersLate()
    secret, record = directory.add()
    auth, cache = make_authenticator(directory, clock)
    first = asyncio.create_task(auth.authenticate(bearer(secret), ADDR))
    for _ in range(50):
        await asyncio.sleep(0)
    directory.update(record.key_id, revoked_at=START)
    cache.drop("key", record.key_id)
    joined = asyncio.create_task(auth.authenticate(bearer(secret), ADDR))  # shares the lookup
    for _ in range(50):
        await asyncio.sleep(0)
    directory.delivered.set()
    assert (await first).key_id == record.key_id
    assert (await joined).key_id == record.key_id
    assert (await refusal(auth, bearer(secret))).status == 401


async def test_a_key_used_outside_its_ip_allowlists_gets_one_403_whichever_list_refused(
    directory: MemoryDirectory, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    own, _ = directory.add(key_id="k-own", cidrs=("192.0.2.10/32",))
    teams, _ = directory.add(key_id="k-team", team_cidrs=("192.0.2.0/24",), cidrs=None)
    orgs, _ = directory.add(
        key_id="k-org", org_cidrs=("198.51.100.0/24",), team_cidrs=("192.0.2.0/24",)
    )
    auth, _ = make_authenticator(directory, clock)
    assert (await auth.authenticate(bearer(own), ADDR)).key_id == "k-own"
    assert (await auth.authenticate(bearer(teams), ADDR)).key_id == "k-team"
    caplog.set_level(logging.INFO, logger="fairgate.auth")
    answers = set()
    for secret in (own, teams):
        refused = await refusal(auth, bearer(secret), "192.0.3.1")  # cached: still refused
        answers.add(answer(refused))
    refused = await refusal(auth, bearer(orgs), ADDR)  # team list holds it, the org's not
    answers.add(answer(refused))
    (only,) = answers
    assert only[0] == 403
    assert b'"code":"address_not_allowed"' in only[1]
    assert b'"type":"permission_error"' in only[1]
    assert b"org" not in only[1] and b"team" not in only[1]  # which list: in the log only
    logged = caplog.text
    assert "key k-own is outside the IP allowlist of key k-own" in logged
    assert "key k-team is outside the IP allowlist of team t" in logged
    assert "key k-org is outside the IP allowlist of org o" in logged
    assert own not in logged


async def test_a_refused_address_is_no_failed_authentication(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    restricted, _ = directory.add(cidrs=("10.0.0.0/8",))
    auth, cache = make_authenticator(directory, clock, failures_per_minute=2)
    for _ in range(20):
        assert (await refusal(auth, bearer(restricted))).status == 403
    assert (await auth.authenticate(bearer(restricted), "10.1.2.3")).key_id == "k1"
    other, _ = directory.add()
    assert (await auth.authenticate(bearer(other), ADDR)).key_id == "k2"  # ADDR not limited
    assert cache.sizes() == (2, 0)


async def test_an_ipv4_client_on_a_dual_stack_socket_passes_an_ipv4_allowlist(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    secret, _ = directory.add(org_cidrs=("192.0.2.0/24",))
    auth, _ = make_authenticator(directory, clock)
    assert (await auth.authenticate(bearer(secret), "::ffff:192.0.2.10")).key_id == "k1"
    assert (await refusal(auth, bearer(secret), "::ffff:192.0.3.10")).status == 403


async def test_a_recheck_of_a_revoked_key_is_the_401_however_its_network_failed_before(
    directory: MemoryDirectory, clock: ManualClock
) -> None:
    """The check that cuts a revoked key's requests in flight (``proxy.in_flight``) went
    through the network's failure limit: a caller who failed ten logins first got a 429
    there, which is no verdict, and the revoked key's stream ran on, retried for ever."""
    secret, _ = directory.add(key_id="k1")
    auth, cache = make_authenticator(directory, clock, failures_per_minute=5)
    await auth.authenticate(bearer(secret), ADDR)
    for _ in range(10):  # the caller puts its own network over the limit
        with contextlib.suppress(GatewayError):
            await auth.authenticate(bearer(random_key()), ADDR)
    assert isinstance(await refusal(auth, bearer(random_key())), RateLimited)
    directory.update("k1", revoked_at=clock.wall())
    cache.drop("key", "k1")
    for _ in range(3):  # as often as the registry may check it: always the verdict
        with rechecking():
            assert isinstance(await refusal(auth, bearer(secret)), Unauthorized)
    # the network's limit is where the caller's own attempts left it
    assert isinstance(await refusal(auth, bearer(random_key())), RateLimited)
