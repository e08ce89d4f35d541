"""The test provider does what the identity tests rely on: its tokens verify against
its published JWKS, its counters count, rotation changes the keys, and the forged
tokens are what their names say."""

from __future__ import annotations

import base64
import urllib.request

import orjson
import pytest
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from tests.oidc_provider.fixture import OidcProvider, StartOidcProvider

pytestmark = pytest.mark.slow


def _get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        result: dict[str, object] = orjson.loads(response.read())
    return result


def _header(token: str) -> dict[str, object]:
    part = token.split(".")[0]
    result: dict[str, object] = orjson.loads(
        base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    )
    return result


def test_a_minted_token_verifies_against_the_discovered_jwks(oidc_provider: OidcProvider) -> None:
    document = _get(oidc_provider.url + "/.well-known/openid-configuration")
    assert document["issuer"] == oidc_provider.issuer
    keys = KeySet.import_key_set(_get(str(document["jwks_uri"])))  # type: ignore[arg-type]
    token = oidc_provider.mint(sub="alice", groups=["physics"])
    claims = jwt.decode(token, keys).claims
    assert claims["sub"] == "alice" and claims["groups"] == ["physics"]
    assert claims["iss"] == oidc_provider.issuer and claims["aud"] == "fairgate"
    assert _header(token)["typ"] == "at+jwt"
    assert oidc_provider.stats()["discovery"] == 1
    assert oidc_provider.stats()["jwks"] == 1


def test_ec_keys_and_omitted_claims(oidc_provider: OidcProvider) -> None:
    keys = KeySet.import_key_set(_get(oidc_provider.url + "/jwks"))  # type: ignore[arg-type]
    token = oidc_provider.mint(alg="ES256", omit=("exp",), header={"typ": "JWT"})
    assert _header(token)["alg"] == "ES256" and _header(token)["typ"] == "JWT"
    assert "exp" not in jwt.decode(token, keys).claims


def test_rotation_with_drop_old_leaves_only_the_new_key(oidc_provider: OidcProvider) -> None:
    old = oidc_provider.mint()
    kid = oidc_provider.rotate(drop_old=True)
    keys = KeySet.import_key_set(_get(oidc_provider.url + "/jwks"))  # type: ignore[arg-type]
    assert [k.kid for k in keys] == [kid]
    assert _header(oidc_provider.mint())["kid"] == kid
    with pytest.raises(InvalidKeyIdError):  # the old kid is gone from the set
        jwt.decode(old, keys)


def test_forged_tokens(oidc_provider: OidcProvider) -> None:
    none = oidc_provider.mint(attack="none")
    assert _header(none)["alg"] == "none" and none.endswith(".")
    confused = oidc_provider.mint(attack="hs256-public-key")
    assert _header(confused)["alg"] == "HS256"
    keys = KeySet.import_key_set(_get(oidc_provider.url + "/jwks"))  # type: ignore[arg-type]
    with pytest.raises(JoseError):
        jwt.decode(confused, keys, algorithms=["RS256", "ES256"])


def test_faults_make_discovery_fail(oidc_provider: OidcProvider) -> None:
    oidc_provider.faults(discovery=503)
    with pytest.raises(urllib.error.HTTPError) as raised:
        _get(oidc_provider.url + "/.well-known/openid-configuration")
    assert raised.value.code == 503
    raised.value.close()
    oidc_provider.reset()
    assert _get(oidc_provider.url + "/.well-known/openid-configuration")["issuer"]


def test_issuer_with_a_path(start_oidc_provider: StartOidcProvider) -> None:
    provider = start_oidc_provider("--issuer-path", "/realms/test")
    assert provider.issuer.endswith("/realms/test")
    document = _get(provider.issuer + "/.well-known/openid-configuration")
    assert document["jwks_uri"] == provider.issuer + "/jwks"
    assert _get(str(document["jwks_uri"]))["keys"]
