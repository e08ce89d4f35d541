"""An async client for the few OpenBao / HashiCorp Vault routes the gateway uses.

The common Python client (hvac) is synchronous; this one runs on aiohttp, the
gateway's own HTTP stack, and does only what reading KV version 2 secrets needs::

    POST /v1/auth/approle/login               AppRole: role_id + secret_id → a token
    GET  /v1/auth/token/lookup-self           a token's remaining TTL and whether it renews
    POST /v1/auth/token/renew-self            extends the token before its lease ends
    GET  /v1/sys/internal/ui/mounts/<mount>   the mount's type and KV version ("2")
    GET  /v1/<mount>/data/<path>[?version=N]  the secret; the fields are under data.data

It is configured as a careful client, not a browser: redirects are never
followed (a 3xx is an error, so the token never goes where an answer points),
``HTTP(S)_PROXY`` and ``.netrc`` are ignored, no cookies are kept, answers are
read in chunks and refused past 1 MiB, and every call is bounded by
``timeout``. Errors (:class:`VaultError`) say what went wrong — the status, the
vault's own error text, a missing field — and never hold a token or a secret.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
from yarl import URL

from fairgate.config.diagnostics import ConfigError
from fairgate.config.secrets import MAX_SECRET_BYTES, VaultLocation
from fairgate.config.vault import VaultSettings

__all__ = ["MAX_ANSWER_BYTES", "VaultClient", "VaultError"]

MAX_ANSWER_BYTES = 1024 * 1024
"""An answer larger than this is refused unread: a KV secret of keys and tokens is small."""

_RENEW_AT = 2 / 3
"""A token is renewed once this fraction of its TTL has passed."""


class VaultError(Exception):
    """A vault call that did not give a usable answer; the message holds no secret."""


class _Denied(VaultError):
    """A 403 on a read: the token is unknown to the vault, or the path is outside its policy."""


class _Current:
    """The default of ``_call``'s ``token``: the client's current token."""


_CURRENT = _Current()


class VaultClient:
    """Reads KV v2 secrets from the server in ``settings``; create in a running event loop.

    The token is obtained on first use (from ``token_file``, or by AppRole login)
    and renewed by :meth:`keep_token` once two thirds of its TTL have passed; a
    token that cannot be renewed is replaced by logging in again (AppRole) or by
    reading ``token_file`` again (a token an agent rotates), and so is one the vault
    refuses before then (see :meth:`read`). ``clock`` is a monotonic clock in seconds.
    """

    def __init__(
        self,
        settings: VaultSettings,
        *,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._max = max_answer_bytes
        self._clock = clock
        self._address = URL(settings.address)
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None
        self._renew_at: float | None = None  # None: the token never expires
        self._renewable = False
        self._kv2_mounts: set[str] = set()
        self._lock = asyncio.Lock()

    async def read(self, location: VaultLocation) -> str:
        """The field ``location`` names, without trailing whitespace; else :class:`VaultError`.

        A 403 from a token the vault no longer knows (revoked, expired early) drops it
        and logs in again at once (``token_file`` read again, or AppRole), then the read
        is tried once more; a 403 from a valid token is its policy, reported as such.
        """
        await self.keep_token()
        token = self._token
        try:
            return await self._read(location)
        except _Denied as denied:
            if not await self._replace_refused(token):
                raise VaultError(str(denied)) from None
        try:
            return await self._read(location)
        except _Denied as denied:
            raise VaultError(str(denied)) from None

    async def _read(self, location: VaultLocation) -> str:
        if location.mount not in self._kv2_mounts:
            await self._check_mount(location.mount)
            self._kv2_mounts.add(location.mount)
        path = f"{location.mount}/data/{'/'.join(location.path)}"
        query = "" if location.version is None else f"?version={location.version}"
        status, answer = await self._call("GET", path + query)
        if status == 404:
            raise VaultError("no such secret or version (404)")
        if status == 403:
            raise _Denied(f"permission denied (403): {_said(answer) or 'permission denied'}")
        _expect(status, answer)
        data = answer.get("data")
        fields = data.get("data") if isinstance(data, dict) else None
        if not isinstance(fields, dict):
            raise VaultError("the secret's version is deleted or destroyed")
        if location.field not in fields:
            raise VaultError(f"the secret has no field '{location.field}'")
        value = fields[location.field]
        if not isinstance(value, str):
            raise VaultError(f"field '{location.field}' is not a string")
        value = value.rstrip()
        if not value:
            raise VaultError(f"field '{location.field}' is empty")
        if len(value.encode()) > MAX_SECRET_BYTES:
            raise VaultError(f"field '{location.field}' is larger than 64 KiB")
        return value

    async def _replace_refused(self, token: str | None) -> bool:
        """After a 403 with ``token``: whether there is now another token worth a retry.

        The vault answers 403 both to a token it does not know and to a path outside a
        known token's policy; ``lookup-self`` tells them apart. A known token is kept
        (False: the 403 stands); an unknown one is dropped and replaced by logging in
        again (True), once per refusal, so a token that is refused again is not
        replaced in a loop: the next read's 403 asks again. A login that fails raises
        its own :class:`VaultError`, and the next read logs in again.
        """
        async with self._lock:
            if self._token != token:
                return self._token is not None  # replaced meanwhile by another read
            if token is not None:
                status, _ = await self._call("GET", "auth/token/lookup-self")
                if status == 200:
                    return False
            self._token = None
            await self._log_in()
            return True

    def renew_in(self) -> float | None:
        """Seconds until the token is due for renewal (0 when due), None when it never expires."""
        if self._token is None:
            return 0.0
        if self._renew_at is None:
            return None
        return max(0.0, self._renew_at - self._clock())

    async def keep_token(self) -> None:
        """Log in when there is no token yet, renew it when due, log in again when it cannot."""
        async with self._lock:
            if self._token is None:
                await self._log_in()
                return
            if self._renew_at is None or self._clock() < self._renew_at:
                return
            if self._renewable and await self._renew():
                return
            await self._log_in()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _log_in(self) -> None:
        self._token = None
        try:
            self._token, ttl, renewable, expiring = await self._new_token()
        except VaultError:
            self._renew_at = None
            raise
        self._lease(ttl, renewable, expiring=expiring)

    async def _new_token(self) -> tuple[str, object, object, bool]:
        """A token from ``token_file`` or AppRole, its TTL, whether it renews, and whether
        a TTL of 0 means it expires now (not never)."""
        s = self._settings
        if s.token_file is not None:
            token = _credential(s.token_file.read, "token_file")
            status, answer = await self._call("GET", "auth/token/lookup-self", token=token)
            if status == 403:
                raise VaultError(
                    "the token in vault.token_file is refused by the vault "
                    f"(403: {_said(answer) or 'permission denied'}): revoked, expired or unknown"
                )
            _expect(status, answer)
            data = _mapping(answer.get("data"))
            # ttl 0 means "never expires" only without an expire_time: a token in its
            # last second also reports 0 (whole seconds), and is due for renewal now.
            expiring = data.get("expire_time") is not None
            return token, data.get("ttl"), data.get("renewable"), expiring
        assert s.role_id_file is not None and s.secret_id_file is not None
        body = {
            "role_id": _credential(s.role_id_file.read, "role_id_file"),
            "secret_id": _credential(s.secret_id_file.read, "secret_id_file"),
        }
        status, answer = await self._call("POST", "auth/approle/login", body, token=None)
        _expect(status, answer)
        auth = answer.get("auth")
        if not isinstance(auth, dict) or not isinstance(auth.get("client_token"), str):
            raise VaultError("the AppRole login answer holds no token")
        return auth["client_token"], auth.get("lease_duration"), auth.get("renewable"), False

    async def _renew(self) -> bool:
        try:
            status, answer = await self._call("POST", "auth/token/renew-self", {})
        except VaultError:
            return False
        auth = answer.get("auth")
        if status != 200 or not isinstance(auth, dict):
            return False
        self._lease(auth.get("lease_duration"), auth.get("renewable"))
        return True

    def _lease(self, ttl: object, renewable: object, *, expiring: bool = False) -> None:
        seconds = ttl if isinstance(ttl, int | float) and not isinstance(ttl, bool) else 0
        self._renewable = renewable is True
        if seconds <= 0:
            self._renew_at = self._clock() if expiring else None
        else:
            self._renew_at = self._clock() + seconds * _RENEW_AT

    async def _check_mount(self, mount: str) -> None:
        status, answer = await self._call("GET", f"sys/internal/ui/mounts/{mount}")
        if status == 403:
            raise _Denied(f"mount '{mount}' does not exist or this token may not use it (403)")
        if status == 404:
            raise VaultError(f"mount '{mount}' does not exist (404)")
        _expect(status, answer)
        data = _mapping(answer.get("data"))
        kind = data.get("type")
        options = _mapping(data.get("options"))
        if kind not in ("kv", "generic"):
            raise VaultError(f"mount '{mount}' is not a KV secrets engine (type {kind!r})")
        if options.get("version") != "2":
            raise VaultError(
                f"mount '{mount}' is a KV version 1 mount: only KV version 2 is supported"
            )

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        token: str | _Current | None = _CURRENT,
    ) -> tuple[int, dict[str, Any]]:
        """One call with ``token`` (default: the current one; None: without a token)."""
        headers = {"X-Vault-Request": "true"}
        sent = self._token if isinstance(token, _Current) else token
        if sent is not None:
            headers["X-Vault-Token"] = sent
        if self._settings.namespace:
            headers["X-Vault-Namespace"] = self._settings.namespace
        url = URL(f"{self._address}/v1/{path}", encoded=True)
        try:
            async with self._client().request(
                method,
                url,
                headers=headers,
                data=None if body is None else orjson.dumps(body),
                allow_redirects=False,
            ) as response:
                if 300 <= response.status < 400:
                    raise VaultError(
                        f"the vault answered a redirect ({response.status}), not followed"
                    )
                raw = await _bounded(response, self._max)
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise VaultError(f"the vault is unreachable: {type(exc).__name__}") from None
        if raw is None:
            raise VaultError(f"the vault's answer is larger than {self._max} bytes")
        try:
            answer = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            raise VaultError(f"the vault's answer ({status}) is not JSON") from None
        if not isinstance(answer, dict):
            raise VaultError(f"the vault's answer ({status}) is not a JSON object")
        return status, answer

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            ssl_context: ssl.SSLContext | bool = False
            if self._address.scheme == "https":
                ca = self._settings.ca_file
                ssl_context = ssl.create_default_context(
                    cafile=str(ca.path) if ca is not None and ca.path is not None else None
                )
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl_context),
                timeout=aiohttp.ClientTimeout(total=self._settings.timeout),
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
            )
        return self._session


def _credential(read: Callable[[], str], key: str) -> str:
    """A credential file's content; the file's problem as a :class:`VaultError`."""
    try:
        return read()
    except ConfigError as exc:
        raise VaultError(f"vault.{key}: {exc.diagnostics[0].message}") from None


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _said(answer: dict[str, Any]) -> str:
    """The vault's own error text in ``answer`` (at most three errors, each cut short)."""
    errors = answer.get("errors")
    return "; ".join(str(e)[:200] for e in errors[:3]) if isinstance(errors, list) else ""


def _expect(status: int, answer: dict[str, Any]) -> None:
    """Raise a :class:`VaultError` for any status but 200, with the vault's own reason."""
    if status == 200:
        return
    said = _said(answer)
    if status == 403:
        raise VaultError(f"permission denied (403){': ' + said if said else ''}")
    raise VaultError(f"the vault answered {status}{': ' + said if said else ''}")


async def _bounded(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    length = response.content_length
    if length is not None and length > limit:
        return None
    body = bytearray()
    async for chunk in response.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
