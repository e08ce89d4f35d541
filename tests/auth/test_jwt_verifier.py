"""The access-token verifier, the key source's refresh rule and the map rules, in process.

Tokens are signed here with joserfc and real RSA/EC keys; the key set is served by a
function instead of HTTP (the e2e tests, tests/e2e/test_jwt.py, use a provider process).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, OctKey, RSAKey
from tests.auth.conftest import START, ManualClock

from fairgate.auth.jwt import (
    KeySource,
    ProviderUnavailable,
    TokenRefused,
    TokenVerifier,
    looks_like_jws,
    person_key_id,
    place,
)

ISSUER = "https://sso.example.org/realms/r"
JWKS = "https://sso.example.org/realms/r/jwks"


def _rsa(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig"}, private=True)


class Provider:
    """Keys and a discovery document served by ``fetch``, counting what is fetched."""

    def __init__(self) -> None:
        self.keys: list[RSAKey | ECKey] = [_rsa("k1")]
        self.fetched: list[str] = []
        self.extra: list[dict[str, Any]] = []
        self.down = False

    async def fetch(self, url: str) -> Mapping[str, Any]:
        self.fetched.append(url)
        await asyncio.sleep(0)
        if self.down:
            raise ProviderUnavailable(f"{url} did not answer")
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": JWKS}
        document = KeySet(list(self.keys)).as_dict(private=False)
        document["keys"].extend(self.extra)
        return document

    def sign(
        self, claims: dict[str, Any], *, kid: str = "k1", alg: str = "RS256", typ: str = "at+jwt"
    ) -> str:
        key = next(k for k in self.keys if k.kid == kid)
        header = {"alg": alg, "kid": kid, "typ": typ}
        token: str = jwt.encode(header, claims, key, algorithms=[alg])
        return token


def claims(**over: Any) -> dict[str, Any]:
    base = {
        "iss": ISSUER,
        "aud": "fairgate",
        "sub": "ada",
        "iat": int(START),
        "exp": int(START) + 300,
        "groups": ["lab"],
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


@dataclass
class Setup:
    provider: Provider
    source: KeySource
    verifier: TokenVerifier
    clock: ManualClock


@pytest.fixture
async def s() -> Setup:
    provider, clock = Provider(), ManualClock()
    source = KeySource(ISSUER, jwks_url=None, min_refresh=60.0, clock=clock, fetch=provider.fetch)
    await source.start()
    verifier = TokenVerifier(source, audience="fairgate", skew=60.0, clock=clock, typ="at+jwt")
    return Setup(provider, source, verifier, clock)


async def refused(s: Setup, token: str) -> str:
    with pytest.raises(TokenRefused) as caught:
        await s.verifier.verify(token)
    return caught.value.reason


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


async def test_a_valid_token_gives_its_issuer_subject_and_expiry_with_the_skew(s: Setup) -> None:
    verified = await s.verifier.verify(s.provider.sign(claims()))
    assert (verified.issuer, verified.subject) == (ISSUER, "ada")
    assert verified.expires_at == START + 300 + 60
    assert (await s.verifier.verify(s.provider.sign(claims(aud=["x", "fairgate"])))).subject


async def test_the_registered_claims_are_checked_after_the_signature(s: Setup) -> None:
    sign = s.provider.sign
    assert await refused(s, sign(claims(iss=ISSUER + "/"))) == "wrong_issuer"  # whole
    assert await refused(s, sign(claims(aud="other"))) == "wrong_audience"
    assert await refused(s, sign(claims(aud=None))) == "wrong_audience"
    assert await refused(s, sign(claims(exp=None))) == "no_expiry"
    assert await refused(s, sign(claims(exp=True))) == "no_expiry"
    assert await refused(s, sign(claims(exp=int(START) - 61))) == "expired"
    assert await refused(s, sign(claims(nbf=int(START) + 61))) == "not_yet_valid"
    assert await refused(s, sign(claims(iat=int(START) + 61))) == "not_yet_valid"
    assert await refused(s, sign(claims(sub=None))) == "no_subject"
    assert await refused(s, sign(claims(sub=""))) == "no_subject"
    assert await refused(s, sign(claims(), typ="JWT")) == "id_token"
    # within the skew: accepted
    assert await s.verifier.verify(sign(claims(exp=int(START) - 30, nbf=int(START) + 30)))
    assert await s.verifier.verify(sign(claims(), typ="application/AT+JWT"))


async def test_a_required_typ_of_jwt_accepts_it_in_any_case(s: Setup) -> None:
    # A workload issuer's tokens (a CI system's ID tokens) say "JWT": the exchange's
    # `type: JWT` must take them, whatever the case on either side.
    verifier = TokenVerifier(s.source, audience="fairgate", skew=60.0, clock=s.clock, typ="JWT")
    for typ in ("JWT", "jwt", "application/JWT"):
        assert await verifier.verify(s.provider.sign(claims(), typ=typ))
    with pytest.raises(TokenRefused) as caught:
        await verifier.verify(s.provider.sign(claims(), typ="at+jwt"))
    assert caught.value.reason == "id_token"


async def test_alg_none_and_every_hmac_algorithm_are_refused_before_any_key(s: Setup) -> None:
    payload = _b64(json.dumps(claims()).encode())
    none = _b64(json.dumps({"alg": "none", "typ": "at+jwt"}).encode()) + "." + payload + "."
    assert await refused(s, none) == "alg_refused"
    public_pem = s.provider.keys[0].as_pem(private=False)
    for alg, digest in (("HS256", hashlib.sha256), ("HS384", hashlib.sha384)):
        header = _b64(json.dumps({"alg": alg, "kid": "k1", "typ": "at+jwt"}).encode())
        mac = hmac.new(public_pem, f"{header}.{payload}".encode(), digest).digest()
        assert await refused(s, f"{header}.{payload}.{_b64(mac)}") == "alg_refused"
    # a genuine HS256 token, whatever its secret (joserfc itself refuses a PEM as one)
    secret = OctKey.import_key(b"a-shared-secret-of-32-bytes-long!")
    hs = jwt.encode({"alg": "HS256", "kid": "k1", "typ": "at+jwt"}, claims(), secret)
    assert await refused(s, hs) == "alg_refused"
    fetched = len(s.provider.fetched)
    assert fetched == 2  # discovery and the key set at start, nothing since


async def test_a_key_of_another_type_than_the_alg_and_a_bad_signature_are_refused(
    s: Setup,
) -> None:
    token = s.provider.sign(claims())
    header, payload, signature = token.split(".")
    es = _b64(json.dumps({"alg": "ES256", "kid": "k1", "typ": "at+jwt"}).encode())
    assert await refused(s, f"{es}.{payload}.{signature}") == "alg_refused"
    other = _b64(json.dumps(claims(sub="mallory")).encode())
    assert await refused(s, f"{header}.{other}.{signature}") == "bad_signature"
    jku = _b64(json.dumps({"alg": "RS256", "jku": "https://evil/", "typ": "at+jwt"}).encode())
    assert await refused(s, f"{jku}.{payload}.{signature}") == "header_refused"


async def test_symmetric_private_and_encryption_keys_of_the_set_are_never_used(s: Setup) -> None:
    s.provider.extra = [
        {"kty": "oct", "kid": "sym", "k": _b64(b"secret" * 8)},
        {**_rsa("enc").as_dict(private=False), "use": "enc"},
        _rsa("priv").as_dict(private=True),
    ]
    s.clock.advance(61)
    await s.source.start()
    for kid in ("sym", "enc", "priv"):
        assert await s.source.key(kid) is None


async def test_unknown_kids_fetch_the_key_set_at_most_once_per_min_refresh(s: Setup) -> None:
    s.provider.fetched.clear()
    s.clock.advance(61)
    token = s.provider.sign(claims())
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    forged = []
    for i in range(500):
        header["kid"] = f"nope-{i}"
        forged.append(_b64(json.dumps(header).encode()) + "." + token.split(".", 1)[1])
    reasons = await asyncio.gather(*(refused(s, t) for t in forged))
    assert set(reasons) == {"unknown_kid"}
    assert len(s.provider.fetched) == 1  # one fetch, shared by every concurrent caller
    for t in forged[:50]:
        assert await refused(s, t) == "unknown_kid"
    assert len(s.provider.fetched) == 1  # and none before min_refresh is over
    # a rotation: the new kid is found at the next allowed fetch
    s.provider.keys.append(_rsa("k2"))
    new = s.provider.sign(claims(), kid="k2")
    assert await refused(s, new) == "unknown_kid"
    s.clock.advance(60)
    assert (await s.verifier.verify(new)).subject == "ada"
    assert len(s.provider.fetched) == 2


async def test_a_key_set_without_a_usable_key_does_not_replace_the_known_keys(s: Setup) -> None:
    # a provider answering an empty set (a broken deploy, an outage page in JSON) made
    # every token refused until the set was fetched again, a min_refresh after it healed
    valid = s.provider.sign(claims())
    s.provider.keys = []
    s.provider.extra = [{"kty": "oct", "kid": "sym", "k": _b64(b"secret" * 8)}]
    s.provider.fetched.clear()
    s.clock.advance(61)
    token = valid  # its kid changed: an unknown kid makes the set fetched again
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    header["kid"] = "rotated-away"
    assert await refused(s, _b64(json.dumps(header).encode()) + "." + token.split(".", 1)[1]) == (
        "unknown_kid"
    )
    assert len(s.provider.fetched) == 1
    assert (await s.verifier.verify(valid)).subject == "ada"
    # at start-up, such a set is a provider that cannot be used yet
    fresh = KeySource(
        ISSUER, jwks_url=JWKS, min_refresh=60.0, clock=s.clock, fetch=s.provider.fetch
    )
    with pytest.raises(ProviderUnavailable, match="no usable signing key"):
        await fresh.start()


async def test_a_provider_down_at_start_raises_and_keeps_its_tokens_refused() -> None:
    provider, clock = Provider(), ManualClock()
    provider.down = True
    source = KeySource(ISSUER, jwks_url=JWKS, min_refresh=60.0, clock=clock, fetch=provider.fetch)
    with pytest.raises(ProviderUnavailable):
        await source.start()
    verifier = TokenVerifier(source, audience="fairgate", skew=60.0, clock=clock)
    with pytest.raises(TokenRefused) as caught:
        await verifier.verify(provider.sign(claims()))
    assert caught.value.reason == "keys_unavailable"
    provider.down = False
    await source.start()
    assert (await verifier.verify(provider.sign(claims()))).subject == "ada"
    assert provider.fetched == [JWKS, JWKS]  # jwks_url given: no discovery


async def test_discovery_naming_another_issuer_or_a_plain_http_jwks_is_refused() -> None:
    clock = ManualClock()

    async def other(url: str) -> Mapping[str, Any]:
        return {"issuer": ISSUER + "/x", "jwks_uri": JWKS}

    async def plain(url: str) -> Mapping[str, Any]:
        return {"issuer": ISSUER, "jwks_uri": "http://sso.example.org/jwks"}

    for fetch in (other, plain):
        source = KeySource(ISSUER, jwks_url=None, min_refresh=60.0, clock=clock, fetch=fetch)
        with pytest.raises(ProviderUnavailable):
            await source.start()


@pytest.mark.parametrize(
    "junk",
    [
        "",
        "a.b",
        "a.b.c.d",
        "....",
        "eyJ.eyJ.",
        "!!.??.**",
        "e30.e30.e30",
        "W10.W10.abc",
        "x" * 20000,
    ],
)
async def test_junk_is_malformed(s: Setup, junk: str) -> None:
    if not looks_like_jws(junk):
        return
    assert await refused(s, junk) in ("malformed", "alg_refused")


@dataclass(frozen=True)
class Rule:
    value: str
    team: str
    claim: str = "groups"
    project: str | None = None


def test_map_rules_first_match_wins_on_a_string_or_a_list() -> None:
    rules = [
        Rule("physics", "phys"),
        Rule("chem", "chem", claim="department", project="eval"),
        Rule("lab", "lab"),
    ]
    assert place(rules, {"groups": ["lab", "physics"]}) == place(rules, {"groups": "physics"})
    assert place(rules, {"groups": ["lab", "physics"]}).team == "phys"  # type: ignore[union-attr]
    chem = place(rules, {"groups": ["x"], "department": "chem"})
    assert chem is not None and (chem.team, chem.project) == ("chem", "eval")
    assert place(rules, {"groups": ["lab"]}).team == "lab"  # type: ignore[union-attr]
    assert place(rules, {"groups": ["nobody"]}) is None
    assert place(rules, {"groups": {"physics": 1}}) is None  # neither a string nor a list
    assert place(rules, {"groups": [["physics"]]}) is None
    assert place(rules, {}) is None


def test_a_map_rule_on_email_needs_the_address_verified() -> None:
    rules = [Rule("ada@x.org", "phys", claim="email")]
    assert place(rules, {"email": "ada@x.org"}) is None
    assert place(rules, {"email": "ada@x.org", "email_verified": "true"}) is None
    verified = place(rules, {"email": "ada@x.org", "email_verified": True})
    assert verified is not None and verified.team == "phys"


def test_a_person_key_id_is_stable_and_separates_issuer_from_subject() -> None:
    a = person_key_id("https://a", "b:c")
    assert a == person_key_id("https://a", "b:c") and a.startswith("jwt-") and len(a) == 26
    assert a != person_key_id("https://a:b", "c")
    assert a != person_key_id("https://b", "b:c")


async def test_a_subject_no_store_can_hold_is_refused(s: Setup) -> None:
    assert await refused(s, s.provider.sign(claims(sub="a\x00b"))) == "no_subject"
    assert await refused(s, s.provider.sign(claims(sub="x" * 1025))) == "no_subject"
