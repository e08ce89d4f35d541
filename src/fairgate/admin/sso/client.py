"""The gateway as an OpenID Connect client: the authorization-code flow with PKCE S256.

    started = await client.begin(remote)                # (provider URL, login cookie value)
    signed_in = await client.finish(cookie, state, code)  # the verified claims, or LoginFailed

Authlib builds the authorization URL (``state``, ``nonce``, the S256 code challenge)
and exchanges the code at the token endpoint (client_secret_basic with a secret,
else as a public client sending only the verifier). joserfc verifies the ID token:
its signature with the provider's key set (asymmetric algorithms only, so neither
``alg: none`` nor a public key used as an HMAC secret passes), ``iss`` whole,
``aud`` holding the client id (and ``azp`` the client id when several audiences),
``exp``, ``iat``, and the ``nonce`` this login sent.

A login in progress lives in the store (``sso_logins``), keyed by the SHA-256 of
a random value in the browser's ``__Host-fairgate-sso`` cookie: the callback
must come back to the browser that started the login (no login CSRF: another
site cannot plant that cookie), with the ``state`` sent, within LOGIN_TTL, and
once (the row is deleted as it is read), on whichever replica the provider sends
the browser to. Each new login first deletes the logins never finished in time, so
the table holds at most LOGIN_TTL's worth.

Starting a login needs no credential and writes a row, so starts are bounded: each
client network (an IPv4 address or IPv6 /64, with the /24, /48 and /32 aggregates,
the rule of ``fairgate.auth.failures``) may start STARTS_PER_MINUTE logins in a
sliding minute on each replica (429 with Retry-After beyond), and no new login
starts while MAX_PENDING are in progress in the store (503), whoever started them:
a flood from many networks fills at most MAX_PENDING rows, for at most LOGIN_TTL.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.httpx_client import AsyncOAuth2Client
from joserfc import jws, jwt
from joserfc.errors import JoseError

from fairgate.accounts import csrf
from fairgate.admin.sso.provider import Provider, ProviderError, http_client
from fairgate.auth.failures import FailureLimiter
from fairgate.config.sso import Sso
from fairgate.core.clock import Clock
from fairgate.core.errors import RateLimited, ServiceUnavailable
from fairgate.store import Store, from_unix, sso_logins

__all__ = ["LOGIN_COOKIE", "LOGIN_TTL", "LoginFailed", "SignedIn", "SsoClient"]

log = logging.getLogger("fairgate.admin")

LOGIN_COOKIE = "__Host-fairgate-sso"
LOGIN_TTL = 600.0
"""Seconds a login may take at the provider."""

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
"""ID-token algorithms accepted: asymmetric only."""

_LEEWAY = 60

STARTS_PER_MINUTE = 20
"""Logins one client network may start in a sliding minute (per replica)."""
STARTS_PER_AGGREGATE = 200
"""The same for an IPv4 /24 or an IPv6 /48 together (an IPv6 /32: five times that)."""
MAX_PENDING = 10_000
"""Logins in progress in the store beyond which no new one starts."""


class LoginFailed(Exception):
    """A login that does not sign anyone in; ``reason`` is for the server's log only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A finished login: the ID token's verified claims (with the userinfo answer's
    claims for the same ``sub`` added) and the ID token itself (the logout hint)."""

    claims: Mapping[str, object]
    id_token: str


class SsoClient:
    """Starts and finishes logins for one ``sso:`` configuration."""

    def __init__(self, config: Sso, store: Store, clock: Clock) -> None:
        self.config = config
        self.provider = Provider(config.issuer)
        self._store = store
        self._clock = clock
        self._starts = FailureLimiter(
            STARTS_PER_MINUTE,
            clock,
            ipv4_24=STARTS_PER_AGGREGATE,
            ipv6_48=STARTS_PER_AGGREGATE,
            ipv6_32=5 * STARTS_PER_AGGREGATE,
        )
        secret = config.client_secret_file
        self._secret = secret.read() if secret is not None else None

    def _oauth(self) -> AsyncOAuth2Client:
        return AsyncOAuth2Client(
            self.config.client_id,
            self._secret,
            scope=" ".join(self.config.scopes),
            redirect_uri=self.config.redirect_url,
            code_challenge_method="S256",
            token_endpoint_auth_method="client_secret_basic" if self._secret else "none",
            timeout=10.0,
            follow_redirects=False,
            trust_env=False,
        )

    async def begin(self, remote: str) -> tuple[str, str]:
        """The provider's authorization URL to send the browser to and the value of its
        login cookie, for a browser at ``remote``; raises RateLimited when that network
        started too many logins, ServiceUnavailable when MAX_PENDING are in progress,
        ProviderError when discovery fails."""
        wait = self._starts.blocked(remote)
        if wait is not None:
            log.warning("sso: login refused: %s started too many logins", remote)
            raise RateLimited(
                "too many sign-ins were started from your network; try again shortly",
                code="sso_throttled",
                retry_after=wait,
            )
        self._starts.failed(remote)  # one start counted, whatever becomes of it
        meta = await self.provider.metadata()
        cookie = secrets.token_urlsafe(32)
        state, nonce, verifier = generate_token(43), generate_token(43), generate_token(64)
        async with self._oauth() as oauth:
            url, _ = oauth.create_authorization_url(
                meta.authorization_endpoint, state=state, nonce=nonce, code_verifier=verifier
            )
        now = from_unix(self._clock.wall())
        async with self._store.write() as conn:
            await sso_logins.prune(conn, now=now)  # logins never finished: at most LOGIN_TTL old
            if await sso_logins.pending(conn) >= MAX_PENDING:
                log.error("sso: login refused: %d logins are in progress already", MAX_PENDING)
                raise ServiceUnavailable(
                    "too many sign-ins are in progress; try again in a few minutes",
                    code="sso_busy",
                )
            await sso_logins.insert_login(
                conn,
                id_sha256=csrf.digest(cookie),
                state=state,
                nonce=nonce,
                code_verifier=verifier,
                now=now,
                expires_at=now + timedelta(seconds=LOGIN_TTL),
            )
        return url, cookie

    async def finish(self, cookie: str | None, state: str | None, code: str | None) -> SignedIn:
        """The verified sign-in of the login bound to ``cookie``; LoginFailed otherwise."""
        if cookie is None or not state or not code or len(cookie) > 64:
            raise LoginFailed("callback without the login cookie, a state or a code")
        now = from_unix(self._clock.wall())
        async with self._store.write() as conn:
            pending = await sso_logins.take(conn, csrf.digest(cookie), now=now)
        if pending is None:
            raise LoginFailed("no login in progress for this browser (unknown, used or expired)")
        if not hmac.compare_digest(pending.state.encode(), state.encode()):
            raise LoginFailed("the state does not match this browser's login")
        try:
            meta = await self.provider.metadata()
            async with self._oauth() as oauth:
                token: dict[str, Any] = await oauth.fetch_token(
                    meta.token_endpoint, code=code, code_verifier=pending.code_verifier
                )
        except (OAuthError, httpx.HTTPError, ProviderError, ValueError) as exc:
            raise LoginFailed(
                f"the token endpoint refused the code: {type(exc).__name__}"
            ) from None
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise LoginFailed("the token answer holds no ID token")
        claims = await self._verify(id_token, pending.nonce)
        userinfo = await self._userinfo(meta.userinfo_endpoint, token.get("access_token"))
        if userinfo.get("sub") == claims["sub"]:  # OIDC Core §5.3.2: else ignore it
            claims = {**userinfo, **claims}
        return SignedIn(claims=claims, id_token=id_token)

    async def _verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        try:
            header = jws.extract_compact(id_token.encode()).headers()
            keys = await self.provider.keys(header.get("kid"))
            decoded = jwt.decode(id_token, keys, algorithms=list(ALGORITHMS))
            claims = decoded.claims
            jwt.JWTClaimsRegistry(
                now=int(self._clock.wall()),
                leeway=_LEEWAY,
                iss={"essential": True, "value": self.config.issuer},
                aud={"essential": True, "value": self.config.client_id},
                exp={"essential": True},
                iat={"essential": True},
                sub={"essential": True},
                nonce={"essential": True, "value": nonce},
            ).validate(claims)
        except (JoseError, ValueError, TypeError) as exc:
            raise LoginFailed(f"ID token refused: {type(exc).__name__}: {exc}") from None
        except ProviderError as exc:
            raise LoginFailed(f"ID token keys: {exc}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.config.client_id:
            raise LoginFailed("ID token refused: several audiences and azp is not this client")
        return dict(claims)

    async def _userinfo(self, url: str | None, access_token: object) -> Mapping[str, object]:
        """The userinfo answer (groups often live only there), or nothing."""
        if url is None or not isinstance(access_token, str):
            return {}
        try:
            async with http_client() as client:
                answer = await client.get(url, headers={"authorization": f"Bearer {access_token}"})
            document = answer.json() if answer.status_code == 200 else {}
        except (httpx.HTTPError, ValueError) as exc:
            log.info(
                "sso: userinfo unreadable (%s); the ID token's claims only", type(exc).__name__
            )
            return {}
        return document if isinstance(document, dict) else {}

    async def end_session_url(self, id_token_hint: str | None) -> str | None:
        """Where to send the browser to end its session at the provider (RP-initiated
        logout), or None when the provider has no end-session endpoint."""
        try:
            meta = await self.provider.metadata()
        except ProviderError as exc:
            log.info("sso: no end-session URL: %s", exc)
            return None
        if meta.end_session_endpoint is None:
            return None
        params = {"client_id": self.config.client_id}
        if id_token_hint:
            params["id_token_hint"] = id_token_hint
        if self.config.post_logout_redirect_url:
            params["post_logout_redirect_uri"] = self.config.post_logout_redirect_url
        return str(httpx.URL(meta.end_session_endpoint, params=params))
