"""The ``sso:`` section: administrators sign in with OpenID Connect (``fairgate.admin.sso``).

sso:
  issuer: "https://login.example.org/realms/research"   # discovery at {issuer}/.well-known/…
  client_id: fairgate-admin
  client_secret_file: secrets/sso.secret    # absent: a public client (PKCE only)
  redirect_url: "https://llm.example.org/admin/callback"
  scopes: [openid, profile, email, groups]  # default openid, profile, email
  session_ttl: 8h                           # at most 168h
  role:                                     # claims -> roles, every matching entry applies
    - {value: llm-admins, role: proxy_admin}
    - {value: physics-leads, role: org_admin, org: physics}
    - {claim: email, value: "ada@example.org", role: team_admin, team: lab-nlp}

The issuer is compared whole with the ``iss`` of every ID token, so it is
written exactly as the provider spells it (no trailing slash is added or
removed). It must be https; plain http is accepted only for a loopback host
(a provider on the same machine, e.g. in tests), since the ID token and the
authorization code would otherwise cross the network in the clear.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StrictStr, model_validator

from fairgate.config.fields import Name, PositiveDuration, Section, describe
from fairgate.config.secrets import SecretRef

__all__ = ["MAX_SESSION_TTL", "Sso", "SsoRole", "secure_url"]

MAX_SESSION_TTL = 168 * 3600.0
"""An SSO session lives at most a week: the provider is asked again after that."""

SsoRoleName = Literal["proxy_admin", "proxy_viewer", "org_admin", "team_admin", "viewer"]


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def secure_url(value: str, what: str) -> str:
    """``value`` if it is an https URL (http for a loopback host) with a host and no
    credentials or fragment; else ValueError naming ``what``."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an http(s) URL with a host, got {describe(value)}")
    if "@" in parts.netloc or parts.fragment or "#" in value:
        raise ValueError(f"{what} must not hold credentials or a fragment")
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise ValueError(f"{what} must be https (plain http only for a loopback host)")
    return value


def _issuer(value: str) -> str:
    if "?" in value:
        raise ValueError("sso.issuer must not have a query string")
    return secure_url(value, "sso.issuer")


def _redirect(value: str) -> str:
    return secure_url(value, "sso.redirect_url")


class SsoRole(Section):
    """One binding: a person whose ``claim`` (a string or a list of strings in the ID
    token or the userinfo answer) holds ``value`` gets ``role`` on its scope: the root
    for ``proxy_admin`` and ``proxy_viewer``, ``org`` for ``org_admin``, ``team`` for
    ``team_admin``, ``org`` or ``team`` for ``viewer``."""

    claim: Name = "groups"
    value: Name
    role: SsoRoleName
    org: Name | None = None
    team: Name | None = None

    @model_validator(mode="after")
    def _scope(self) -> Self:
        if self.org is not None and self.team is not None:
            raise ValueError("give either org or team, not both")
        wants = {
            "proxy_admin": (None,),
            "proxy_viewer": (None,),
            "org_admin": ("org",),
            "team_admin": ("team",),
            "viewer": ("org", "team"),
        }[self.role]
        has = "org" if self.org is not None else "team" if self.team is not None else None
        if has not in wants:
            need = " or ".join(w for w in wants if w) or "neither org nor team"
            raise ValueError(f"role {self.role} needs {need}")
        return self


class Sso(Section):
    """OpenID Connect sign-in for administrators (authorization code, PKCE S256).

    ``client_secret_file`` absent makes the gateway a public client (no secret sent
    to the token endpoint; PKCE alone binds the code). ``session_ttl`` is the
    session's absolute lifetime (the idle timeout is ``accounts.session_idle``).
    ``post_logout_redirect_url`` is where the provider sends the browser after its
    end-session page (absent: the provider's own page).
    """

    issuer: Annotated[StrictStr, AfterValidator(_issuer)]
    client_id: Name
    client_secret_file: SecretRef | None = None
    redirect_url: Annotated[StrictStr, AfterValidator(_redirect)]
    post_logout_redirect_url: Annotated[StrictStr, AfterValidator(_redirect)] | None = None
    scopes: tuple[Name, ...] = ("openid", "profile", "email")
    session_ttl: PositiveDuration = Field(default=8 * 3600.0, le=MAX_SESSION_TTL)
    role: tuple[SsoRole, ...] = ()

    @model_validator(mode="after")
    def _openid(self) -> Self:
        if "openid" not in self.scopes:
            raise ValueError("sso.scopes must include openid")
        if not urlsplit(self.redirect_url).path.endswith("/admin/callback"):
            raise ValueError("sso.redirect_url must end in /admin/callback")
        return self
