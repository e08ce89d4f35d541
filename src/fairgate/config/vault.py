"""The ``vault`` section: where ``vault:`` secret references are read (OpenBao or HashiCorp Vault).

One server, KV version 2 mounts only, and one way to log in: a token read from
``token_file``, or AppRole (``role_id_file`` and ``secret_id_file``). The
credentials themselves are files, never vault references (the vault cannot hold
the key that opens it).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from pydantic import field_validator, model_validator

from fairgate.config.fields import PositiveDuration, Section, describe
from fairgate.config.secrets import SecretRef

__all__ = ["VaultSettings"]

_NAMESPACE = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


class VaultSettings(Section):
    """The vault server that ``vault:`` references are read from.

    ``address`` is ``https://host[:port]`` (``http://`` only to a loopback
    address); ``ca_file`` the PEM bundle that server's certificate is checked
    against (the system's trust store when absent); ``namespace`` is sent as
    ``X-Vault-Namespace`` when set; every secret is read again each
    ``cache_ttl``; ``timeout`` bounds one call to the vault.
    """

    address: str
    token_file: SecretRef | None = None
    role_id_file: SecretRef | None = None
    secret_id_file: SecretRef | None = None
    ca_file: SecretRef | None = None
    namespace: str | None = None
    cache_ttl: PositiveDuration = 300.0
    timeout: PositiveDuration = 5.0

    @field_validator("address")
    @classmethod
    def _https(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an https:// URL, got {describe(value)}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("the vault address must not hold credentials: use token_file")
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise ValueError("the vault address is scheme, host and port only (no path)")
        try:
            parts.port  # noqa: B018 - reading it validates it
        except ValueError:
            raise ValueError("the vault address has an invalid port") from None
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise ValueError("the vault address must use https:// (http:// only to loopback)")
        return value.rstrip("/")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str | None) -> str | None:
        if value is not None and (not _NAMESPACE.fullmatch(value) or ".." in value.split("/")):
            raise ValueError("a namespace is names of A-Z a-z 0-9 . _ - separated by '/'")
        return value

    @model_validator(mode="after")
    def _one_login(self) -> VaultSettings:
        approle = self.role_id_file is not None or self.secret_id_file is not None
        if self.token_file is not None and approle:
            raise ValueError("set token_file or role_id_file and secret_id_file, not both")
        if self.token_file is None and not approle:
            raise ValueError("needs token_file, or role_id_file and secret_id_file (AppRole)")
        if approle and (self.role_id_file is None or self.secret_id_file is None):
            raise ValueError("AppRole needs both role_id_file and secret_id_file")
        return self

    @field_validator("token_file", "role_id_file", "secret_id_file", "ca_file")
    @classmethod
    def _files(cls, value: SecretRef | None) -> SecretRef | None:
        if value is not None and value.vault is not None:
            raise ValueError("the vault's own credentials must be files, not vault references")
        return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
