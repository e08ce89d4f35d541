"""Planted secrets: no byte the gateway writes holds one, whatever happens.

A unique random marker is the content of every secret the configuration can
hold today, each really used, so that a leak would have something to leak:

    master_key_file                the admin API is called with it
    store.url_file                 a PostgreSQL URL with the marker as its password
    state.url_file                 a Redis URL whose password a redis-server of the
                                   test's own requires (``--requirepass``)
    vault.token_file               the token of a KV v2 server (tests/vault_server.py)
    models[].upstreams[].key_file  read from that vault; the simulator requires it
                                   (and, from a file, the key of an engine that
                                   answers 500 echoing every header it got)
    cache_isolation.key_file       the HMAC key of the prefix-cache salt
    alerts.webhook.token_file      a real webhook receiver checks it
    alerts.smtp.password_file      a real SMTP relay (aiosmtpd) checks it
    listen.tls.key_file,           the TLS private key of both listeners (every line
    admin_listen.tls.key_file      of its PEM body is a marker); clients trust its CA
    metrics_token_file             /metrics is scraped with it (and with a wrong one)
    auth.key_pepper_file           the HMAC key of stored virtual keys and admin tokens
                                   (the client key is re-hashed with it on first use)

The scenario: answers plain and streamed, an engine error, an engine down, bad
input of every kind, the admin listings, ``/metrics``, the OpenAPI document,
``check-config`` on a good and a broken file, ``--help``, alerts by webhook
and e-mail, and a SIGTERM shutdown. Every byte the gateway wrote (stdout,
stderr at debug level, every answer's status line, headers and body) is then
searched for each marker, as is, base64-encoded and hex-encoded.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from tests.e2e.conftest import TEST_KEY, write_config
from tests.e2e.robust_wire import until
from tests.e2e.test_alerts import Webhook
from tests.e2e.test_limits import OPERATOR, PRICES
from tests.redis_server import free_port, private_redis_server
from tests.tls_certs import Authority

from fairgate.config import load_config
from fairgate.core.money import Money
from fairgate.server.process import READY_PREFIX
from fairgate.sim.process import SimProcess
from fairgate.tenancy import open_tenancy
from vault_server import Token, VaultServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JSON = "application/json"
FIELDS = (
    "master",
    "pg",
    "redis",
    "vault",
    "engine",
    "echo",
    "salt",
    "webhook",
    "smtp",
    "metrics",
    "pepper",
)


def _encodings(marker: str) -> list[bytes]:
    """``marker`` and the forms a careless log line or header would give it: base64 at
    each of the three alignments (the part that does not depend on its neighbours),
    hex in both cases, and URL-quoted."""
    raw = marker.encode()
    forms = [raw, raw.hex().encode(), raw.hex().upper().encode()]
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)
        forms.append(encoded[4 if shift else 0 : -4])
    forms.append(urllib.parse.quote(marker).encode())
    return forms


@pytest.fixture
def redis_with_password(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A redis-server of this test's own (the shared one is never reconfigured)."""
    password = "redis" + secrets.token_hex(16)
    with private_redis_server(password=password, directory=str(tmp_path)) as server:
        yield server.port, password


class EchoEngine:
    """An engine that answers every request 500, echoing the headers it received."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                self.rfile.read(length)
                body = json.dumps(
                    {"error": {"message": "internal error", "headers": dict(self.headers)}}
                ).encode()
                self.send_response(500)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.send_header("x-echo-authorization", self.headers.get("authorization", ""))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> EchoEngine:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Relay:
    """An SMTP relay (aiosmtpd) on a thread of its own that checks the password."""

    def __init__(self, password: str) -> None:
        self.password = password.encode()
        self.logins: list[bool] = []
        self.mails: list[Envelope] = []
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.mails.append(envelope)
        return "250 Message accepted"

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.password == self.password
        self.logins.append(ok)
        return AuthResult(success=ok)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            self._loop.create_server(
                lambda: SMTP(
                    self,
                    hostname="relay.test",
                    authenticator=self._authenticate,
                    auth_require_tls=False,
                ),
                "127.0.0.1",
                0,
            )
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    def __enter__(self) -> Relay:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class Written:
    """Every byte the gateway wrote that the test saw, labelled by where it came from."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, bytes]] = []

    def answer(self, label: str, response: httpx.Response) -> httpx.Response:
        head = f"HTTP {response.status_code} {response.reason_phrase}\n".encode()
        head += b"".join(k + b": " + v + b"\n" for k, v in response.headers.raw)
        self.parts.append((label, head + response.content))
        return response

    def add(self, label: str, data: bytes) -> None:
        self.parts.append((label, data))

    def leaks(self, markers: dict[str, str]) -> list[str]:
        found = []
        for name, marker in markers.items():
            for form in _encodings(marker):
                for label, data in self.parts:
                    if form in data:
                        found.append(f"the {name} secret ({form[:12]!r}…) in {label}")
        return found


def _write(directory: Path, name: str, value: str) -> str:
    (directory / name).write_text(value + "\n")
    return name


def _configure(
    directory: Path,
    markers: dict[str, str],
    *,
    pg_url: str,
    redis_port: int,
    vault: VaultServer,
    sim: SimProcess,
    echo: EchoEngine,
    webhook: Webhook,
    relay: Relay,
) -> Path:
    tls = {"cert_file": "server.crt", "key_file": "server.key"}
    parts = urllib.parse.urlsplit(pg_url)
    with_password = parts._replace(netloc=f"postgres:{markers['pg']}@{parts.hostname}:{parts.port}")
    down = f"http://127.0.0.1:{free_port()}"
    return write_config(
        directory,
        [
            {
                "name": "m",
                "engine": "vllm",
                "cost": PRICES,
                "upstreams": [
                    {"name": "r0", "url": sim.url, "key_file": "vault:secret/fairgate/engine#key"}
                ],
            },
            {
                "name": "broken",
                "engine": "vllm",
                "upstreams": [
                    {
                        "name": "e0",
                        "url": echo.url,
                        "key_file": _write(directory, "echo.key", markers["echo"]),
                    },
                ],
            },
            {
                "name": "down",
                "engine": "llama-server",
                "upstreams": [{"name": "d0", "url": down, "key_file": "echo.key"}],
            },
        ],
        master_key_file=_write(directory, "master.key", markers["master"]),
        auth={"key_pepper_file": _write(directory, "pepper.key", markers["pepper"])},
        metrics_token_file=_write(directory, "metrics.token", markers["metrics"]),
        store={"url_file": _write(directory, "pg.url", urllib.parse.urlunsplit(with_password))},
        state={
            "backend": "redis",
            "url_file": _write(
                directory,
                "redis.url",
                f"redis://:{markers['redis']}@127.0.0.1:{redis_port}/0",
            ),
        },
        vault={
            "address": vault.url,
            "token_file": _write(directory, "vault.token", markers["vault"]),
        },
        cache_isolation={
            "scope": "team",
            "key_file": _write(directory, "salt.key", markers["salt"]),
        },
        alerts={
            "webhook": {
                "url": webhook.url,
                "token_file": _write(directory, "hook.token", markers["webhook"]),
            },
            "smtp": {
                "host": "127.0.0.1",
                "port": relay.port,
                "sender": "gateway@example.org",
                "recipients": ["ops@example.org"],
                "username": "gateway",
                "password_file": _write(directory, "smtp.password", markers["smtp"]),
            },
        },
        listen={"tls": tls},
        admin_listen={"tls": tls},
        limits={"max_body_bytes": 65536},
        logging={"level": "debug"},
        health={"unhealthy_after": 1},  # /readyz says 503 for "down" after its first check
    )


async def _soft_budget(config: Path) -> None:
    async with open_tenancy(load_config(config)) as tenancy:
        await tenancy.budgets.set(
            OPERATOR, scope="team:t", period="month", max=Money(10_000), soft=Money(25)
        )


def _run_cli(written: Written, label: str, *args: str, cwd: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-m", "fairgate", *args],
        capture_output=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )
    written.add(f"{label} stdout", done.stdout)
    written.add(f"{label} stderr", done.stderr)
    return done.returncode


class Gateway:
    """``fairgate serve`` with its stdout and stderr in files, every byte kept."""

    def __init__(self, config: Path) -> None:
        self.out = config.parent / "serve.stdout"
        self.err = config.parent / "serve.stderr"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "fairgate", "serve", "-c", str(config)],
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        line = until(self._ready_line, 30, "the gateway listens")
        client, _, admin = line[len(READY_PREFIX) :].partition(" admin ")
        self.url, self.admin_url = client.strip(), admin.strip()

    def _ready_line(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError("the gateway exited: " + self.err.read_text()[-2000:])
        for line in self.out.read_text().splitlines():
            if line.startswith(READY_PREFIX):
                return line
        return None

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)


def _chat(model: str, *, stream: bool = False, max_tokens: int = 10) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


def _client_scenario(gw: Gateway, written: Written, master: str, ca: Authority) -> None:
    user = {"authorization": f"Bearer {TEST_KEY}"}
    admin = {"authorization": f"Bearer {master}"}
    assert gw.url.startswith("https://")
    with httpx.Client(base_url=gw.url, timeout=30, verify=ca.trusting()) as client:
        for i in range(4):  # 10 each: the third crosses the soft limit of 25
            answer = written.answer(
                f"chat {i}", client.post("/v1/chat/completions", json=_chat("m"), headers=user)
            )
            assert answer.status_code == 200, answer.text
        streamed = written.answer(
            "stream",
            client.post("/v1/chat/completions", json=_chat("m", stream=True), headers=user),
        )
        assert streamed.status_code == 200 and b"[DONE]" in streamed.content
        broken = written.answer(
            "engine error",
            client.post("/v1/chat/completions", json=_chat("broken"), headers=user),
        )
        assert broken.status_code == 500
        assert b"[redacted]" in broken.content  # the engine echoed its key: scrubbed
        down = written.answer(
            "engine down", client.post("/v1/completions", json=_chat("down"), headers=user)
        )
        assert down.status_code in (502, 503)
        hostile: list[tuple[str, str, dict[str, str], bytes]] = [
            ("malformed JSON", "/v1/chat/completions", user, b'{"model": "m", '),
            ("unknown model", "/v1/chat/completions", user, json.dumps(_chat("nope")).encode()),
            ("oversized", "/v1/chat/completions", user, b'{"x":"' + b"a" * 70000 + b'"}'),
            ("bad key", "/v1/chat/completions", {"authorization": "Bearer fg-bad"}, b"{}"),
            ("no key", "/v1/chat/completions", {}, b"{}"),
            ("master key as a client key", "/v1/chat/completions", admin, b"{}"),
            ("engine-internal route", "/slots", user, b"{}"),
            ("encoded traversal", "/v1/%2e%2e/props", user, b"{}"),
        ]
        for label, path, headers, body in hostile:
            answer = written.answer(
                label,
                client.post(path, content=body, headers={**headers, "content-type": JSON}),
            )
            assert 400 <= answer.status_code < 500, (label, answer.status_code)
        written.answer("models", client.get("/v1/models", headers=user))
        written.answer("me", client.get("/me", headers=user))


def _admin_scenario(
    gw: Gateway, written: Written, master: str, ca: Authority, metrics_token: str
) -> None:
    admin = {"authorization": f"Bearer {master}"}
    with httpx.Client(base_url=gw.admin_url, timeout=30, verify=ca.trusting()) as client:
        for path in (
            "/admin/keys",
            "/admin/teams",
            "/admin/orgs",
            "/admin/users",
            "/admin/whoami",
            "/admin/admin-tokens",
            "/admin/budgets",
            "/admin/audit",
            "/admin/openapi.json",
            "/metrics",
            "/healthz",
            "/readyz",
        ):
            answer = written.answer(path, client.get(path, headers=admin))
            # /readyz: 503 while the model whose engine is down cannot be served
            assert answer.status_code == (503 if path == "/readyz" else 200), (path, answer.text)
        scraped = written.answer(
            "/metrics with its token",
            client.get("/metrics", headers={"authorization": f"Bearer {metrics_token}"}),
        )
        assert scraped.status_code == 200, scraped.text
        wrong = written.answer(
            "/metrics with a wrong token",
            client.get("/metrics", headers={"authorization": f"Bearer x{metrics_token}"}),
        )
        assert wrong.status_code == 200, wrong.text  # loopback: served by its network rule
        created = written.answer(
            "key created", client.post("/admin/keys", json={"team": "t"}, headers=admin)
        )
        assert created.status_code == 201, created.text
        written.answer(
            "wrong admin token",
            client.get("/admin/keys", headers={"authorization": "Bearer fga-" + "x" * 40}),
        )
        written.answer(
            "bad admin body",
            client.post(
                "/admin/keys",
                content=b"{nope",
                headers={**admin, "content-type": "application/json"},
            ),
        )


def test_no_secret_appears_in_anything_the_gateway_writes(
    tmp_path: Path, pg_database: str, redis_with_password: tuple[int, str]
) -> None:
    redis_port, redis_password = redis_with_password
    markers = {name: f"{name}{secrets.token_hex(16)}" for name in FIELDS}
    markers["redis"] = redis_password
    written = Written()
    vault = VaultServer().start()
    try:
        vault.tokens[markers["vault"]] = Token(markers["vault"])
        vault.put("secret", "fairgate/engine", {"key": markers["engine"]})
        (tmp_path / "engine.key").write_text(markers["engine"])
        with (
            SimProcess(
                "--model", "m", "--speed", "0", "--api-key-file", str(tmp_path / "engine.key")
            ) as sim,
            EchoEngine() as echo,
            Webhook() as webhook,
            Relay(markers["smtp"]) as relay,
        ):
            (tmp_path / "gw").mkdir()
            ca = Authority("planted secrets CA")
            server = ca.issue("gateway", server=True)
            server.write(tmp_path / "gw", "server")
            body = [
                line
                for line in server.key_pem.splitlines()
                if "-----" not in line and len(line) >= 16  # a short tail could match by chance
            ]
            markers.update({f"tls key line {i}": line for i, line in enumerate(body)})
            config = _configure(
                tmp_path / "gw",
                markers,
                pg_url=pg_database,
                redis_port=redis_port,
                vault=vault,
                sim=sim,
                echo=echo,
                webhook=webhook,
                relay=relay,
            )
            asyncio.run(_soft_budget(config))
            gw = Gateway(config)
            try:
                _client_scenario(gw, written, markers["master"], ca)
                _admin_scenario(gw, written, markers["master"], ca, markers["metrics"])
                # The alerts prove the webhook token and the SMTP password were used.
                until(lambda: webhook.received and relay.mails, 20, "both alerts arrive")
                assert webhook.received[0][0] == f"Bearer {markers['webhook']}"
                assert relay.logins and all(relay.logins)
            finally:
                assert gw.stop() == 0
            written.add("serve stdout", gw.out.read_bytes())
            written.add("serve stderr", gw.err.read_bytes())
            assert b"shutting down" in gw.err.read_bytes()
            directory = config.parent
            assert (
                _run_cli(written, "check-config", "check-config", "-c", str(config), cwd=directory)
                == 0
            )
            broken = directory / "broken.yaml"
            broken.write_text(config.read_text().replace('"listen"', '"listen_typo"', 1))
            assert (
                _run_cli(
                    written, "check-config broken", "check-config", "-c", str(broken), cwd=directory
                )
                == 1
            )
            assert _run_cli(written, "--help", "--help", cwd=directory) == 0
            assert _run_cli(written, "serve --help", "serve", "--help", cwd=directory) == 0
    finally:
        vault.stop()
    assert written.parts and sum(len(data) for _, data in written.parts) > 10_000
    leaks = written.leaks(markers)
    assert not leaks, "\n".join(leaks)
