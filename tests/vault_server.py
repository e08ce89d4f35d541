"""A KV version 2 server for tests: the OpenBao / HashiCorp Vault routes the gateway uses.

Neither OpenBao nor Vault can be installed here, so this reproduces, over a real
socket, the routes the gateway calls, with their status codes and JSON
envelopes (``request_id``, ``lease_id``, ``renewable``, ``lease_duration``,
``data``, ``wrap_info``, ``warnings``, ``auth``; ``{"errors": [...]}`` on
failure)::

    GET       /v1/sys/internal/ui/mounts/<mount>   the mount's type and options.version
    GET       /v1/<mount>/data/<path>[?version=N]  a KV v2 read: data.data, data.metadata
    POST|PUT  /v1/<mount>/data/<path>              a KV v2 write ({"data": {...}}) → metadata
    GET|PUT   /v1/<mount>/<path>                   a KV v1 mount's read and write
    POST      /v1/auth/approle/login               role_id + secret_id → auth.client_token
    GET       /v1/auth/token/lookup-self           data.ttl, data.renewable, …
    POST      /v1/auth/token/renew-self            auth.lease_duration renewed

As Vault does: a missing, expired or unknown token gets 403 ``permission
denied``; a token reads only the paths of its policy; a secret or version that
does not exist is 404 with ``{"errors": []}``; a deleted version is 404 with its
metadata; an unknown mount is 403 on the mounts route; namespaces
(``X-Vault-Namespace``) hold mounts of their own; a token's TTL runs on the
server's clock and ends it. Faults for attack tests: ``redirect_to`` answers
every request with a 302 to that URL, ``oversize`` pads every answer past it.

Run in a thread of the test process (``VaultServer().start()``) or as its own
process: ``python tests/vault_server.py --port 8200 --root-token T``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import secrets
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

__all__ = ["Role", "Token", "VaultServer"]


@dataclass
class Token:
    """A token: ``paths`` it may read or write (``mount/path`` prefixes; None: all),
    ``ttl`` seconds (0: never expires), ``renewable`` up to ``max_ttl``."""

    id: str
    paths: tuple[str, ...] | None = None
    ttl: float = 0.0
    renewable: bool = False
    max_ttl: float = 0.0
    namespace: str = ""
    issued: float = field(default_factory=time.time)
    expires: float | None = None
    renewals: int = 0

    def alive(self, now: float) -> bool:
        return self.expires is None or now < self.expires

    def may(self, path: str) -> bool:
        return self.paths is None or any(path.startswith(p) for p in self.paths)

    def may_see_mount(self, mount: str) -> bool:
        """Vault's preflight check: some capability on a path under the mount."""
        return self.paths is None or any(p.startswith(mount + "/") for p in self.paths)


@dataclass
class Role:
    """An AppRole: its ``secret_id`` and what the tokens it hands out may do."""

    secret_id: str
    paths: tuple[str, ...] | None = None
    token_ttl: float = 3600.0
    renewable: bool = True
    max_ttl: float = 0.0
    logins: int = 0


@dataclass
class _Version:
    data: dict[str, Any] | None
    created: str
    deleted: str = ""


@dataclass
class _Mount:
    version: int
    secrets: dict[str, list[_Version]] = field(default_factory=dict)
    accessor: str = field(default_factory=lambda: "kv_" + secrets.token_hex(4))


class VaultServer:
    """The server and its state; ``start``/``stop`` may alternate (the port is kept)."""

    def __init__(
        self,
        *,
        root_token: str = "root-token",
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.tokens: dict[str, Token] = {root_token: Token(root_token)}
        self.roles: dict[str, Role] = {}
        self.namespaces: dict[str, dict[str, _Mount]] = {"": {"secret": _Mount(2)}}
        self.redirect_to: str | None = None
        self.oversize: int | None = None
        self.requests: list[tuple[str, str, str]] = []  # method, path, namespace
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- state set up by tests ------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def mount(self, name: str, *, version: int = 2, namespace: str = "") -> None:
        self.namespaces.setdefault(namespace, {})[name] = _Mount(version)

    def put(self, mount: str, path: str, data: dict[str, Any], *, namespace: str = "") -> int:
        """Write a new version of ``mount/path``; its number."""
        kv = self.namespaces[namespace][mount]
        versions = kv.secrets.setdefault(path, [])
        if kv.version == 1:
            versions[:] = [_Version(dict(data), _now())]
            return 1
        versions.append(_Version(dict(data), _now()))
        return len(versions)

    def delete_version(self, mount: str, path: str, version: int, namespace: str = "") -> None:
        self.namespaces[namespace][mount].secrets[path][version - 1].deleted = _now()

    def token(
        self,
        *,
        paths: tuple[str, ...] | None = None,
        ttl: float = 0.0,
        renewable: bool = False,
        max_ttl: float = 0.0,
        namespace: str = "",
    ) -> str:
        """A new token; its id."""
        token = Token("s." + secrets.token_urlsafe(18), paths, ttl, renewable, max_ttl, namespace)
        token.expires = token.issued + ttl if ttl else None
        self.tokens[token.id] = token
        return token.id

    def approle(self, role_id: str, **options: Any) -> str:
        """A new AppRole ``role_id``; its secret id."""
        secret_id = secrets.token_hex(16)
        self.roles[role_id] = Role(secret_id, **options)
        return secret_id

    def count(self, path: str) -> int:
        return sum(1 for _, p, _ in self.requests if p == path)

    # -- running --------------------------------------------------------------------

    def start(self) -> VaultServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._open())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=serve, name="vault-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None

    def __enter__(self) -> VaultServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    async def _open(self) -> None:
        app = web.Application(middlewares=[self._faults])
        app.router.add_route("*", "/v1/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, ssl_context=self.ssl_context, reuse_address=True
        )
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.base_events.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the routes -----------------------------------------------------------------

    @web.middleware
    async def _faults(self, request: web.Request, handler: Any) -> web.StreamResponse:
        namespace = request.headers.get("X-Vault-Namespace", "").strip("/")
        self.requests.append((request.method, request.path, namespace))
        if self.redirect_to is not None:
            raise web.HTTPFound(self.redirect_to + request.path_qs)
        response: web.StreamResponse = await handler(request)
        if self.oversize is not None and isinstance(response, web.Response):
            assert response.body is not None and isinstance(response.body, bytes)
            padded = orjson.loads(response.body)
            padded["warnings"] = ["x" * self.oversize]
            return _json(response.status, padded)
        return response

    async def _dispatch(self, request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        namespace = request.headers.get("X-Vault-Namespace", "").strip("/")
        if tail == "auth/approle/login" and request.method in ("POST", "PUT"):
            return await self._login(request, namespace)
        token = self._token(request, namespace)
        if token is None:
            return _errors(403, "permission denied")
        if tail == "auth/token/lookup-self" and request.method == "GET":
            return self._lookup(token)
        if tail == "auth/token/renew-self" and request.method in ("POST", "PUT"):
            return self._renew(token)
        mounts = self.namespaces.get(namespace, {})
        if tail.startswith("sys/internal/ui/mounts/"):
            return self._mount_info(mounts, tail.removeprefix("sys/internal/ui/mounts/"), token)
        mount_name, _, rest = tail.partition("/")
        kv = mounts.get(mount_name)
        if kv is None:
            return _errors(404, 'no handler for route "' + tail + '". route entry not found.')
        if not token.may(f"{mount_name}/{rest.removeprefix('data/')}"):
            return _errors(403, "permission denied")
        if kv.version == 1:
            return await self._kv1(request, kv, rest)
        if not rest.startswith("data/"):
            return _errors(404, "1 error occurred:\n\t* unsupported path\n\n")
        return await self._kv2(request, kv, rest.removeprefix("data/"))

    def _token(self, request: web.Request, namespace: str) -> Token | None:
        token = self.tokens.get(request.headers.get("X-Vault-Token", ""))
        if token is None or not token.alive(time.time()):
            return None
        if token.namespace and token.namespace != namespace:
            return None
        return token

    async def _login(self, request: web.Request, namespace: str) -> web.Response:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _errors(400, "failed to parse JSON input")
        role = self.roles.get(body.get("role_id", "")) if isinstance(body, dict) else None
        if role is None:
            return _errors(400, "invalid role or secret ID")
        if not secrets.compare_digest(str(body.get("secret_id", "")), role.secret_id):
            return _errors(400, "invalid role or secret ID")
        role.logins += 1
        token_id = self.token(
            paths=role.paths,
            ttl=role.token_ttl,
            renewable=role.renewable,
            max_ttl=role.max_ttl,
            namespace=namespace,
        )
        auth = {
            "client_token": token_id,
            "accessor": secrets.token_urlsafe(12),
            "policies": ["default"],
            "token_policies": ["default"],
            "metadata": {"role_name": "gateway"},
            "lease_duration": int(role.token_ttl),
            "renewable": role.renewable,
            "entity_id": str(uuid.uuid4()),
            "token_type": "service",
            "orphan": True,
            "num_uses": 0,
        }
        return _json(200, _envelope(None, auth=auth))

    def _lookup(self, token: Token) -> web.Response:
        now = time.time()
        ttl = 0 if token.expires is None else max(0, int(token.expires - now))
        data = {
            "accessor": "acc-" + token.id[-6:],
            "creation_time": int(token.issued),
            "creation_ttl": int(token.ttl),
            "display_name": "token",
            "entity_id": "",
            "expire_time": None if token.expires is None else _iso(token.expires),
            "explicit_max_ttl": int(token.max_ttl),
            "id": token.id,
            "issue_time": _iso(token.issued),
            "meta": None,
            "num_uses": 0,
            "orphan": False,
            "path": "auth/token/create",
            "policies": ["root"] if token.paths is None else ["default"],
            "renewable": token.renewable,
            "ttl": ttl,
            "type": "service",
        }
        return _json(200, _envelope(data))

    def _renew(self, token: Token) -> web.Response:
        if not token.renewable or token.expires is None:
            return _errors(400, "lease is not renewable")
        now = time.time()
        expires = now + token.ttl
        if token.max_ttl:
            expires = min(expires, token.issued + token.max_ttl)
        token.expires = expires
        token.renewals += 1
        auth = {
            "client_token": token.id,
            "policies": ["default"],
            "metadata": None,
            "lease_duration": int(expires - now),
            "renewable": True,
        }
        return _json(200, _envelope(None, auth=auth))

    def _mount_info(self, mounts: dict[str, _Mount], name: str, token: Token) -> web.Response:
        kv = mounts.get(name.strip("/"))
        if kv is None or not token.may_see_mount(name.strip("/")):
            return _errors(
                403,
                "preflight capability check returned 403, please ensure client's policies "
                f'grant access to path "{name.strip("/")}/"',
            )
        data = {
            "accessor": kv.accessor,
            "config": {"default_lease_ttl": 0, "force_no_cache": False, "max_lease_ttl": 0},
            "description": "key/value secret storage",
            "external_entropy_access": False,
            "local": False,
            "options": {"version": str(kv.version)} if kv.version == 2 else None,
            "path": name.strip("/") + "/",
            "seal_wrap": False,
            "type": "kv",
            "uuid": str(uuid.uuid4()),
        }
        return _json(200, _envelope(data))

    async def _kv2(self, request: web.Request, kv: _Mount, path: str) -> web.Response:
        if request.method in ("POST", "PUT"):
            body = orjson.loads(await request.read())
            versions = kv.secrets.setdefault(path, [])
            versions.append(_Version(dict(body["data"]), _now()))
            return _json(200, _envelope(_metadata(versions[-1], len(versions))))
        if request.method != "GET":
            return _errors(405, "unsupported operation")
        versions = kv.secrets.get(path)
        if not versions:
            return _errors(404)
        wanted = request.query.get("version")
        number = len(versions) if wanted in (None, "", "0") else int(wanted)
        if not 1 <= number <= len(versions):
            return _errors(404)
        version = versions[number - 1]
        metadata = _metadata(version, number)
        if version.deleted:
            return _json(404, _envelope({"data": None, "metadata": metadata}))
        return _json(200, _envelope({"data": version.data, "metadata": metadata}))

    async def _kv1(self, request: web.Request, kv: _Mount, path: str) -> web.Response:
        if request.method in ("POST", "PUT"):
            kv.secrets[path] = [_Version(orjson.loads(await request.read()), _now())]
            return web.Response(status=204)
        versions = kv.secrets.get(path)
        if not versions:
            return _errors(404)
        response = _envelope(versions[-1].data)
        response["lease_duration"] = 2764800
        return _json(200, response)


def _metadata(version: _Version, number: int) -> dict[str, Any]:
    return {
        "created_time": version.created,
        "custom_metadata": None,
        "deletion_time": version.deleted,
        "destroyed": False,
        "version": number,
    }


def _envelope(data: Any, *, auth: Any = None) -> dict[str, Any]:
    return {
        "request_id": str(uuid.uuid4()),
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": data,
        "wrap_info": None,
        "warnings": None,
        "auth": auth,
        "mount_type": "kv" if data is not None and auth is None else "",
    }


def _errors(status: int, *messages: str) -> web.Response:
    return _json(status, {"errors": list(messages)})


def _json(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _now() -> str:
    return _iso(time.time())


def _iso(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).isoformat().replace("+00:00", "Z")


def main() -> None:  # pragma: no cover - manual use
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8200)
    parser.add_argument("--root-token", required=True)
    args = parser.parse_args()
    server = VaultServer(root_token=args.root_token, host=args.host, port=args.port).start()
    print(f"vault listening on {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
