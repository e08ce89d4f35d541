"""An OpenID provider for tests: discovery, a real JWKS, tokens signed with the claims a test sets.

No identity provider can be installed here, so this one is small and built on
joserfc (the library the gateway verifies with, which keeps the two honest:
the provider signs exactly as a JOSE library does, the gateway is what decides).
It is a real process on a real socket (``python -m tests.oidc_provider --port 0``
prints ``oidc provider listening on <url>``; ``fixture.OidcProvider`` starts it)::

    GET  /.well-known/openid-configuration   issuer, jwks_uri and the interactive endpoints
    GET  /jwks                               the public keys (RSA and EC, made at start)
    POST /_test/mint                         a signed token with the claims the body gives
    POST /_test/rotate                       a new signing key (the old ones kept or dropped)
    POST /_test/faults                       make discovery or the JWKS answer an error status
    GET  /_test/stats                        how many times discovery and the JWKS were fetched
    POST /_test/reset                        the counters back to zero, the faults cleared

``/_test/mint`` takes ``{"claims": {...}, "header": {...}, "kid": "...", "alg": "...",
"omit": ["exp", ...], "attack": "none" | "hs256-public-key"}``. Missing registered
claims are filled in (``iss`` the issuer, ``aud`` the default audience, ``iat``,
``nbf`` and ``exp`` five minutes on, a random ``jti``, ``sub`` "person-1") unless
``omit`` names them; ``typ`` is ``at+jwt`` unless the header says otherwise
(``"typ": "JWT"`` for an ID token's shape). The two attacks build tokens no honest
library signs: ``none`` has an empty signature and ``"alg": "none"``; and
``hs256-public-key`` is HMAC-SHA256 keyed with the active key's public PEM, the
classic confusion of a verifier that trusts the header's ``alg``.

The interactive part (authorize with PKCE, token, end session) lives in
``login.py``, which adds its routes through ``EXTRA_ROUTES`` below; each entry is
called with the ``Provider`` and returns Starlette routes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from tests.oidc_provider.login import login_routes

__all__ = ["EXTRA_ROUTES", "READY_PREFIX", "Provider", "build_app"]

READY_PREFIX = "oidc provider listening on "

_KEY_KINDS = {"RS256": "rsa", "PS256": "rsa", "ES256": "ec"}

RouteFactory = Callable[["Provider"], Sequence[BaseRoute]]

EXTRA_ROUTES: tuple[RouteFactory, ...] = (login_routes,)


@dataclass
class SigningKey:
    """A private key the provider signs with and publishes (public half) in its JWKS."""

    kid: str
    alg: str
    key: RSAKey | ECKey

    def public_pem(self) -> bytes:
        pem: bytes = self.key.as_pem(private=False)
        return pem


def _new_key(alg: str) -> SigningKey:
    kid = secrets.token_hex(8)
    parameters = {"kid": kid, "use": "sig", "alg": alg}
    key: RSAKey | ECKey
    if _KEY_KINDS[alg] == "rsa":
        key = RSAKey.generate_key(2048, parameters=parameters, private=True)
    else:
        key = ECKey.generate_key("P-256", parameters=parameters, private=True)
    return SigningKey(kid, alg, key)


@dataclass
class Provider:
    """The provider's state: its issuer, keys, counters and faults.

    ``issuer`` is set once the socket is bound (the port is only known then).
    ``active`` is the kid that signs when a mint names none.
    """

    issuer: str = ""
    audience: str = "fairgate"
    keys: dict[str, SigningKey] = field(default_factory=dict)
    active: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=lambda: {"discovery": 0, "jwks": 0, "minted": 0})
    faults: dict[str, int] = field(default_factory=dict)

    @classmethod
    def create(cls, *, audience: str = "fairgate") -> Provider:
        provider = cls(audience=audience)
        for alg in ("RS256", "ES256"):
            provider.add_key(alg)
        provider.active = next(iter(provider.keys))
        return provider

    def add_key(self, alg: str = "RS256") -> SigningKey:
        signing = _new_key(alg)
        self.keys[signing.kid] = signing
        return signing

    def rotate(self, *, alg: str = "RS256", drop_old: bool = False) -> SigningKey:
        """A new active key; with ``drop_old`` every other key leaves the JWKS."""
        signing = self.add_key(alg)
        if drop_old:
            self.keys = {signing.kid: signing}
        self.active = signing.kid
        return signing

    def discovery(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "issuer": self.issuer,
            "jwks_uri": self.issuer + "/jwks",
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "end_session_endpoint": self.issuer + "/logout",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": sorted({k.alg for k in self.keys.values()}),
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code"],
            "scopes_supported": ["openid", "profile", "email", "groups"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
        }
        document.update(self.metadata)
        return document

    def jwks(self) -> dict[str, Any]:
        return KeySet([k.key for k in self.keys.values()]).as_dict(private=False)

    def claims(self, given: dict[str, Any], omit: Sequence[str] = ()) -> dict[str, Any]:
        """``given`` with the registered claims it lacks filled in, less those ``omit`` names."""
        now = int(time.time())
        defaults: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": "person-1",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
            "jti": secrets.token_hex(12),
        }
        claims = {**defaults, **given}
        for name in omit:
            claims.pop(name, None)
        return claims

    def sign(
        self,
        claims: dict[str, Any],
        *,
        header: dict[str, Any] | None = None,
        kid: str | None = None,
        alg: str | None = None,
    ) -> str:
        """A JWS compact token over ``claims`` (taken as they are) with the key ``kid``.

        ``kid`` may name a key the provider does not hold: the token is then signed
        with the active key but carries that kid (an unknown-kid token)."""
        signing = self.keys.get(kid or "") or self._key_for(alg)
        protected = {"typ": "at+jwt", **(header or {})}
        protected["alg"] = alg or signing.alg
        protected["kid"] = kid or signing.kid
        self.stats["minted"] += 1
        token: str = jwt.encode(protected, claims, signing.key, algorithms=[protected["alg"]])
        return token

    def _key_for(self, alg: str | None) -> SigningKey:
        """The active key, or with ``alg`` the newest key of that algorithm's kind."""
        if alg is None:
            return self.keys[self.active]
        fitting = [k for k in self.keys.values() if _KEY_KINDS[k.alg] == _KEY_KINDS.get(alg)]
        return fitting[-1] if fitting else self.add_key(alg)

    def forge(self, attack: str, claims: dict[str, Any], header: dict[str, Any]) -> str:
        """A token no honest library signs (see the module docstring)."""
        signing = self.keys[self.active]
        protected = {"typ": "at+jwt", "kid": signing.kid, **header}
        if attack == "none":
            protected["alg"] = "none"
            return _b64(orjson.dumps(protected)) + "." + _b64(orjson.dumps(claims)) + "."
        if attack == "hs256-public-key":
            protected["alg"] = "HS256"
            signing_input = _b64(orjson.dumps(protected)) + "." + _b64(orjson.dumps(claims))
            mac = hmac.new(signing.public_pem(), signing_input.encode(), hashlib.sha256).digest()
            return signing_input + "." + _b64(mac)
        raise ValueError(f"unknown attack {attack!r}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def build_app(provider: Provider) -> Starlette:
    """The provider's routes (and those of every ``EXTRA_ROUTES`` factory)."""

    def faulted(name: str) -> Response | None:
        status = provider.faults.get(name)
        return None if not status else JSONResponse({"error": "fault"}, status_code=status)

    async def discovery(request: Request) -> Response:
        provider.stats["discovery"] += 1
        return faulted("discovery") or JSONResponse(provider.discovery())

    async def jwks(request: Request) -> Response:
        provider.stats["jwks"] += 1
        return faulted("jwks") or JSONResponse(provider.jwks())

    async def mint(request: Request) -> Response:
        body: dict[str, Any] = orjson.loads(await request.body() or b"{}")
        claims = provider.claims(body.get("claims", {}), body.get("omit", ()))
        header = body.get("header", {})
        if attack := body.get("attack"):
            token = provider.forge(attack, claims, header)
        else:
            token = provider.sign(claims, header=header, kid=body.get("kid"), alg=body.get("alg"))
        return JSONResponse({"token": token, "claims": claims})

    async def rotate(request: Request) -> Response:
        body: dict[str, Any] = orjson.loads(await request.body() or b"{}")
        signing = provider.rotate(
            alg=body.get("alg", "RS256"), drop_old=body.get("drop_old", False)
        )
        return JSONResponse({"kid": signing.kid, "kids": list(provider.keys)})

    async def faults(request: Request) -> Response:
        body: dict[str, int] = orjson.loads(await request.body() or b"{}")
        provider.faults.update(body)
        return JSONResponse(provider.faults)

    async def stats(request: Request) -> Response:
        return JSONResponse(
            {**provider.stats, "kids": list(provider.keys), "active": provider.active}
        )

    async def reset(request: Request) -> Response:
        provider.stats.update(discovery=0, jwks=0, minted=0)
        provider.faults.clear()
        return JSONResponse(provider.stats)

    routes: list[BaseRoute] = [
        Route("/.well-known/openid-configuration", discovery),
        Route("/jwks", jwks),
        Route("/_test/mint", mint, methods=["POST"]),
        Route("/_test/rotate", rotate, methods=["POST"]),
        Route("/_test/faults", faults, methods=["POST"]),
        Route("/_test/stats", stats),
        Route("/_test/reset", reset, methods=["POST"]),
    ]
    for factory in EXTRA_ROUTES:
        routes.extend(factory(provider))
    return Starlette(routes=routes)
