"""Verifying an access token: JWS compact, an asymmetric signature, the registered claims.

    verifier = TokenVerifier(source, audience="fairgate", skew=60.0, clock=clock, typ="at+jwt")
    claims = await verifier.verify(token)       # or TokenRefused(reason)

The order is what keeps it cheap and safe: the shape, the header's ``alg``
(only RS*, PS*, ES* and EdDSA: ``none`` and every HMAC algorithm are refused
before any key is touched, so the issuer's public key can never serve as an
HS256 secret), the ``typ`` when one is required, the unverified ``iss`` (a
token of another issuer costs no key fetch), then the key by ``kid`` and the
signature (joserfc, with the header's algorithm as the only one allowed and a
key of the matching type), and only then the claims of the signed payload:
``iss`` whole, ``aud`` holding the audience, ``exp`` required, ``nbf`` and
``iat`` with the skew, ``sub`` a non-empty string.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey, RSAKey

from fairgate.auth.jwt.keys import KeySource
from fairgate.core.clock import Clock

__all__ = [
    "ALGORITHMS",
    "MAX_TOKEN",
    "Claims",
    "TokenRefused",
    "TokenVerifier",
    "looks_like_jws",
]

ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""The only signature algorithms accepted: asymmetric ones."""

MAX_TOKEN = 16 * 1024
"""The longest token verified (bytes); a longer bearer is refused unread."""

_KEY_TYPES = {"RS": RSAKey, "PS": RSAKey, "ES": ECKey, "Ed": OKPKey}
_SEGMENT = re.compile(r"[A-Za-z0-9_-]*")


class TokenRefused(Exception):
    """The token is not accepted; ``reason`` is for the server's log and metric only."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Claims:
    """A verified token's issuer, subject, expiry (Unix seconds) and every claim."""

    issuer: str
    subject: str
    expires_at: float
    values: Mapping[str, Any]


def looks_like_jws(bearer: str) -> bool:
    """The cheap test the request path runs on every bearer: three dot-separated parts
    (no virtual key has a dot)."""
    return bearer.count(".") == 2


def _json_segment(segment: str) -> dict[str, Any]:
    if not segment or _SEGMENT.fullmatch(segment) is None:
        raise TokenRefused("malformed")
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        raise TokenRefused("malformed") from None
    if not isinstance(decoded, dict):
        raise TokenRefused("malformed")
    return decoded


def _storable(text: str) -> bool:
    """Whether a store can hold ``text``: UTF-8 (no lone surrogate) without NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class TokenVerifier:
    """Verifies tokens of one issuer for one audience (see the module docstring).

    ``typ``: the ``typ`` header required (``at+jwt`` or ``JWT``, also with
    ``application/``, any case on either side); None accepts any. ``skew`` (seconds) is the
    tolerance on ``exp``, ``nbf`` and ``iat``.
    """

    def __init__(
        self,
        source: KeySource,
        *,
        audience: str,
        skew: float,
        clock: Clock,
        typ: str | None = None,
    ) -> None:
        self.issuer = source.issuer
        self.source = source
        self._audience = audience
        self._skew = skew
        self._clock = clock
        self._typ = None if typ is None else typ.lower()  # compared with a lower-cased header

    def header_and_issuer(self, token: str) -> tuple[dict[str, Any], object]:
        """The header and the unverified ``iss`` of a JWS-compact ``token`` (TokenRefused
        ``malformed`` when it is not one)."""
        if len(token) > MAX_TOKEN or not token.isascii():
            raise TokenRefused("malformed")
        parts = token.split(".")
        if len(parts) != 3 or not parts[2] or _SEGMENT.fullmatch(parts[2]) is None:
            # an empty signature is alg none's: refused for its alg when the header says so
            if len(parts) == 3 and not parts[2]:
                header = _json_segment(parts[0])
                if header.get("alg") not in ALGORITHMS:
                    raise TokenRefused("alg_refused")
            raise TokenRefused("malformed")
        return _json_segment(parts[0]), _json_segment(parts[1]).get("iss")

    async def verify(self, token: str) -> Claims:
        """The token's claims, or TokenRefused with the reason."""
        header, unverified_issuer = self.header_and_issuer(token)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            raise TokenRefused("alg_refused")
        if "crit" in header or "jku" in header or "x5u" in header or "jwk" in header:
            raise TokenRefused("header_refused")  # keys come from the issuer's JWKS only
        if self._typ is not None:
            typ = header.get("typ")
            if not isinstance(typ, str) or typ.lower().removeprefix("application/") != self._typ:
                raise TokenRefused("id_token")
        if unverified_issuer != self.issuer:
            raise TokenRefused("wrong_issuer")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("malformed")
        if not self.source.ready:
            raise TokenRefused("keys_unavailable")
        key = await self.source.key(kid)
        if key is None:
            raise TokenRefused("unknown_kid")
        if not isinstance(key, _KEY_TYPES[alg[:2]]):
            raise TokenRefused("alg_refused")
        try:
            signed = jws.deserialize_compact(token, key, algorithms=[alg])
        except JoseError:
            raise TokenRefused("bad_signature") from None
        except (ValueError, TypeError):
            raise TokenRefused("malformed") from None
        try:
            claims = orjson.loads(signed.payload)
        except orjson.JSONDecodeError:
            raise TokenRefused("malformed") from None
        if not isinstance(claims, dict):
            raise TokenRefused("malformed")
        return self._checked(claims)

    def _checked(self, claims: dict[str, Any]) -> Claims:
        if claims.get("iss") != self.issuer:
            raise TokenRefused("wrong_issuer")
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if self._audience not in audiences:
            raise TokenRefused("wrong_audience")
        now = self._clock.wall()
        exp = _number(claims.get("exp"))
        if exp is None:
            raise TokenRefused("no_expiry")
        if now >= exp + self._skew:
            raise TokenRefused("expired")
        for name in ("nbf", "iat"):
            if name in claims:
                moment = _number(claims[name])
                if moment is None:
                    raise TokenRefused("malformed")
                if moment > now + self._skew:
                    raise TokenRefused("not_yet_valid")
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub or len(sub) > 1024 or not _storable(sub):
            raise TokenRefused("no_subject")
        return Claims(self.issuer, sub, exp + self._skew, claims)
