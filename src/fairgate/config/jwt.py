"""The ``jwt:`` section: callers present their institution's access token (``fairgate.auth.jwt``).

jwt:
  issuer: "https://sso.example.org/realms/research"   # compared whole with every token's iss
  audience: fairgate                                   # required; the token's aud must hold it
  type: at+jwt                                         # optional: refuse ID tokens (RFC 9068)
  # jwks_url: …          (else the discovery document's jwks_uri)
  clock_skew: 60s        # tolerance on exp, nbf and iat
  min_refresh: 60s       # at most one key-set fetch per this, whatever the unknown kids
  rpm: 60                # limits of every person, as a key's
  map:                   # first match wins
    - {value: lab-physics, team: physics}                    # claim defaults to groups
    - {claim: department, value: chemistry, team: chem, project: eval}
  exchange:              # workload tokens swapped for short-lived keys at /v1/auth/exchange
    - issuer: "https://ci.example.org"
      audience: fairgate
      key_ttl: 1h
      max_keys: 100      # unexpired keys per workload identity; one more revokes the oldest
      exchanges_per_minute: 120  # per workload identity, on every gateway together; more: 429
      map: [{claim: project_path, value: lab/infer, team: physics}]

The issuer is compared whole (no trailing slash added or removed) and must be
https; plain http only for a loopback host (a provider on the same machine, as
in tests). The same holds for ``jwks_url`` and the discovery document's
``jwks_uri``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, StrictInt, StrictStr, model_validator

from fairgate.config.fields import Name, NonEmpty, PositiveDuration, Section
from fairgate.config.sso import secure_url

__all__ = ["MAX_EXCHANGED_KEYS", "MAX_KEY_TTL", "Jwt", "JwtExchange", "JwtMap"]

MAX_KEY_TTL = 24 * 3600.0
"""An exchanged key lives at most a day: a job asks again with a fresh workload token."""

MAX_EXCHANGED_KEYS = 100_000
"""The highest ``max_keys``: each unexpired exchanged key is a row and a secret to revoke."""


def _issuer(value: str) -> str:
    if "?" in value:
        raise ValueError("jwt issuer must not have a query string")
    return secure_url(value, "jwt issuer")


def _jwks(value: str) -> str:
    return secure_url(value, "jwt.jwks_url")


Issuer = Annotated[StrictStr, AfterValidator(_issuer)]
Limit = Annotated[StrictInt, Field(ge=1)]


class JwtMap(Section):
    """One rule: a token whose ``claim`` (a string or a list of strings) holds ``value``
    is a member of ``team`` (and ``project`` of it, when given)."""

    claim: Name = "groups"
    value: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    team: Name
    project: Name | None = None


class JwtExchange(Section):
    """An issuer of workload tokens (a CI system's OIDC) that ``/v1/auth/exchange`` takes."""

    issuer: Issuer
    audience: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    jwks_url: Annotated[StrictStr, AfterValidator(_jwks)] | None = None
    type: Literal["at+jwt", "JWT"] | None = None
    map: Annotated[tuple[JwtMap, ...], NonEmpty]
    key_ttl: PositiveDuration = Field(default=3600.0, le=MAX_KEY_TTL)
    max_keys: Annotated[StrictInt, Field(ge=1, le=MAX_EXCHANGED_KEYS)] = 100
    exchanges_per_minute: Annotated[StrictInt, Field(ge=1, le=MAX_EXCHANGED_KEYS)] = 120
    """Exchanges per workload identity in any minute (each one stores a new secret):
    a job that loops on the endpoint, or a stolen token, cannot flood the store."""


class Jwt(Section):
    """OIDC access tokens on the inference API; see the module docstring.

    ``rpm``, ``tpm`` and ``max_inflight`` are every person's limits (each person is
    one synthetic key); absent, the team's per-key limits apply as to any key.
    ``optional_at_start``: a provider that does not answer discovery at start-up
    does not stop the gateway; tokens are refused until it answers (retried in the
    background).
    """

    issuer: Issuer
    audience: Annotated[StrictStr, Field(min_length=1, max_length=256)]
    type: Literal["at+jwt"] | None = None
    jwks_url: Annotated[StrictStr, AfterValidator(_jwks)] | None = None
    clock_skew: PositiveDuration = Field(default=60.0, le=600.0)
    min_refresh: PositiveDuration = Field(default=60.0, ge=1.0)
    map: tuple[JwtMap, ...] = ()
    rpm: Limit | None = None
    tpm: Limit | None = None
    max_inflight: Limit | None = None
    optional_at_start: bool = False
    exchange: tuple[JwtExchange, ...] = ()

    @model_validator(mode="after")
    def _issuers(self) -> Self:
        seen = [self.issuer, *(e.issuer for e in self.exchange)]
        if len(set(seen)) != len(seen):
            raise ValueError("each jwt.exchange issuer must differ from the others and jwt.issuer")
        if not self.map and not self.exchange:
            raise ValueError("jwt needs map rules (or exchange issuers): nobody could be mapped")
        return self
