"""Requests the gateway refuses itself, fail-closed, and engine errors it relays scrubbed.

Every refusal is the OpenAI envelope with an ``x-request-id`` and never
reaches the engine (the simulator records nothing). An engine's small error
body that quotes the internal key reaches the client with the key removed.
The simulator never echoes its key and does not serve audio routes, so a small
aiohttp server plays that engine here: a real server, answering on a socket.
"""

from __future__ import annotations

import asyncio
import base64
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from aiohttp import web
from tests.e2e.conftest import AUTH, TEST_KEY, model, write_config
from tests.e2e.raw_client import check_error, raw_request, request_bytes
from tests.e2e.robust_wire import stderr_into, until

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

INTERNAL_KEY = "sk-internal-4f9c2a71d0e8b3"
HELLO = [{"role": "user", "content": "hi"}]


@contextmanager
def echo_upstream() -> Iterator[str]:
    """A real HTTP server: its chat route fails with the status its model names
    (``echo-500`` → 500) and a body quoting the Authorization header it received;
    its transcription route answers with the body it received, base64-encoded."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        status = int(str(body["model"]).rpartition("-")[2])
        message = f"rejected: got Authorization: {request.headers.get('Authorization')}"
        payload = {"error": {"message": message, "type": "server_error", "code": status}}
        return web.json_response(payload, status=status)

    async def transcribe(request: web.Request) -> web.Response:
        received = base64.b64encode(await request.read()).decode()
        return web.json_response({"text": "", "received": received})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/audio/transcriptions", transcribe)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", health)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@dataclass(frozen=True, slots=True)
class Env:
    sim: SimProcess
    gateway: GatewayProcess
    directory: Path  # the configuration's, and the SQLite store's

    def records(self, request_id: str) -> list[tuple[int, str]]:
        """(status, outcome) of the usage records of ``request_id``."""
        with sqlite3.connect(self.directory / "fairgate.db") as db:
            query = "SELECT status, outcome FROM usage_records WHERE request_id = ?"
            return [tuple(row) for row in db.execute(query, (request_id,))]

    def post(self, path: str, content: bytes, content_type: str | None) -> httpx.Response:
        headers = {"content-type": content_type} if content_type else {}
        return httpx.post(
            self.gateway.url + path, content=content, headers={**AUTH, **headers}, timeout=30
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("gw")
    key_file = directory / "internal.key"
    key_file.write_text(INTERNAL_KEY + "\n")
    with ExitStack() as stack:
        sim = stack.enter_context(SimProcess("--speed", "0", "--model", "m"))
        echo = stack.enter_context(echo_upstream())
        keyed = [{"name": "e0", "url": echo, "key_file": str(Path(key_file))}]
        config = write_config(
            directory,
            [
                model("m", sim, aliases=["alias-m"]),
                model("k500", upstream_model="echo-500", upstreams=keyed),
                model("k503", upstream_model="echo-503", upstreams=keyed),
                model(
                    "audio",
                    aliases=["alias-audio"],
                    upstream_model="whisper",
                    upstreams=[{"name": "e0", "url": echo}],
                ),
            ],
            limits={"max_body_bytes": 4096, "max_n": 2, "max_tokens": 100},
            breaker={"failures": 100},
        )
        log = directory / "gateway.log"
        with stderr_into(log):
            gateway = stack.enter_context(GatewayProcess(config))
        yield Env(sim, gateway, directory)


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    env.sim.reset()


def chat_body(**fields: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": HELLO, **fields})


def test_unknown_model_is_404_through_the_sdk(env: Env) -> None:
    client = openai.OpenAI(base_url=env.gateway.url + "/v1", api_key=TEST_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="no-such-model", messages=HELLO)  # type: ignore[arg-type]
    response = raised.value.response
    error = check_error(
        response.status_code,
        response.headers.get("x-request-id"),
        response.content,
        404,
        "model_not_found",
    )
    assert "no-such-model" in error["message"]
    assert env.sim.requests() == []


@pytest.mark.parametrize(
    ("content", "content_type", "status", "code"),
    [
        pytest.param(
            orjson.dumps({"messages": HELLO}),
            "application/json",
            400,
            "model_required",
            id="missing-model",
        ),
        pytest.param(
            orjson.dumps({"model": None, "messages": HELLO}),
            "application/json",
            400,
            "model_unreadable",
            id="model-null",
        ),
        pytest.param(
            orjson.dumps({"model": ["m"], "messages": HELLO}),
            "application/json",
            400,
            "model_unreadable",
            id="model-list",
        ),
        pytest.param(chat_body(), "text/plain", 400, "model_unreadable", id="text-plain"),
        pytest.param(
            chat_body(),
            "application/x-www-form-urlencoded",
            400,
            "model_unreadable",
            id="urlencoded",
        ),
        pytest.param(chat_body(), None, 400, "model_unreadable", id="no-content-type"),
        pytest.param(
            b'{"model": "m", "messages": [',
            "application/json",
            400,
            "invalid_json",
            id="malformed-json",
        ),
        pytest.param(b'["m"]', "application/json", 400, "invalid_json", id="json-array"),
        pytest.param(b"", "application/json", 400, "invalid_json", id="empty-body"),
        pytest.param(chat_body(n=3), "application/json", 400, "n_too_large", id="n-over-cap"),
        pytest.param(
            chat_body(n=3),
            "Application/JSON; charset=utf-8",
            400,
            "n_too_large",
            id="n-over-cap-json-spelt-differently",
        ),
        pytest.param(
            chat_body(n=3),
            "application/vnd.api+json",
            400,
            "n_too_large",
            id="n-over-cap-json-suffix",
        ),
        pytest.param(chat_body(n=0), "application/json", 400, "invalid_value", id="n-zero"),
        pytest.param(
            chat_body(max_tokens=101),
            "application/json",
            400,
            "max_tokens_too_large",
            id="max-tokens-over-cap",
        ),
        pytest.param(
            chat_body(stream="yes"), "application/json", 400, "invalid_value", id="stream-not-bool"
        ),
        pytest.param(
            chat_body(model="m" * 300),
            "application/json",
            404,
            "model_not_found",
            id="unknown-long-model",
        ),
    ],
)
def test_refused_before_the_engine(
    env: Env, content: bytes, content_type: str | None, status: int, code: str
) -> None:
    answer = env.post("/v1/chat/completions", content, content_type)
    check_error(
        answer.status_code, answer.headers.get("x-request-id"), answer.content, status, code
    )
    assert answer.status_code != 422
    assert env.sim.requests() == []


def test_a_chunked_body_that_cannot_be_parsed_is_400_at_once_and_recorded_so(env: Env) -> None:
    """A broken chunk line: answered 400 invalid_http at once, not a minute later for a
    body that never came (limits.client_body_timeout), and recorded as that 400."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
        b"authorization: Bearer " + TEST_KEY.encode() + b"\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    started = time.monotonic()
    answer = raw_request(env.gateway.url, head + b'5\n{"a":\n0\n\n', timeout=20)
    assert time.monotonic() - started < 10
    # the server's own answer, as for a head it cannot parse: no request id is sent
    assert answer.status == 400
    assert orjson.loads(answer.body)["error"]["code"] == "invalid_http"
    assert env.sim.requests() == []
    log = env.directory / "gateway.log"

    def request_id() -> str | None:
        found = re.search(r"request (\S+) POST \S+ ended refused \(invalid_http\)", log.read_text())
        return found.group(1) if found else None

    rid = until(request_id, 10, "the request logged as refused for its body")
    assert until(lambda: env.records(rid), 20, "its usage record") == [(400, "refused")]


def test_an_accept_header_the_engine_could_misread_is_400(env: Env) -> None:
    answer = raw_request(
        env.gateway.url,
        request_bytes(
            "POST",
            "/v1/chat/completions",
            body=chat_body(),
            headers=[("Content-Type", "application/json"), ("Accept", "text/plain\xff")],
        ),
    )
    check_error(answer.status, answer.header("x-request-id"), answer.body, 400)
    assert env.sim.requests() == []


@pytest.mark.parametrize("valid_first", [True, False])
def test_two_authorization_headers_are_refused_whichever_comes_first(
    env: Env, valid_first: bool
) -> None:
    # two credentials on the client API: refused, never one silently preferred
    credentials = [f"Bearer {TEST_KEY}", "Bearer fg-" + "x" * 43]
    if not valid_first:
        credentials.reverse()
    answer = raw_request(
        env.gateway.url,
        request_bytes(
            "POST",
            "/v1/chat/completions",
            body=chat_body(max_tokens=2),
            headers=[("Content-Type", "application/json")]
            + [("Authorization", value) for value in credentials],
        ),
    )
    assert answer.status == 401, answer.body
    assert env.sim.requests() == []


def test_body_over_the_limit_is_413_declared_or_chunked(env: Env) -> None:
    big = chat_body(padding="x" * 5000)
    declared = env.post("/v1/chat/completions", big, "application/json")
    check_error(declared.status_code, declared.headers.get("x-request-id"), declared.content, 413)

    def pieces() -> Iterator[bytes]:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    chunked = httpx.post(
        env.gateway.url + "/v1/chat/completions",
        content=pieces(),
        headers={**AUTH, "content-type": "application/json"},
        timeout=30,
    )
    assert "content-length" not in chunked.request.headers
    check_error(chunked.status_code, chunked.headers.get("x-request-id"), chunked.content, 413)
    assert env.sim.requests() == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/chat/completions"),
        ("PUT", "/v1/embeddings"),
        ("POST", "/v1/models"),
        ("DELETE", "/v1/models/m"),
        ("GET", "/nowhere"),
    ],
)
def test_wrong_method_or_unknown_route_is_404(env: Env, method: str, path: str) -> None:
    answer = httpx.request(
        method,
        env.gateway.url + path,
        content=chat_body(),
        headers={**AUTH, "content-type": "application/json"},
        timeout=30,
    )
    check_error(
        answer.status_code, answer.headers.get("x-request-id"), answer.content, 404, "unknown_route"
    )
    assert env.sim.requests() == []


def test_multipart_model_field_is_resolved_and_rewritten(env: Env) -> None:
    audio = bytes(range(256)) * 4  # binary: must arrive byte for byte
    answer = httpx.post(
        env.gateway.url + "/v1/audio/transcriptions",
        data={"model": "alias-audio", "language": "en", "priority": "9"},
        files={"file": ("clip.wav", audio, "audio/wav")},
        timeout=30,
        headers=AUTH,
    )
    assert answer.status_code == 200
    body = base64.b64decode(answer.json()["received"])
    assert audio in body
    assert b'name="model"\r\n\r\nwhisper\r\n' in body
    assert b"alias-audio" not in body and b'name="priority"' not in body
    assert b'name="language"\r\n\r\nen\r\n' in body


def test_multipart_without_model_is_400(env: Env) -> None:
    answer = httpx.post(
        env.gateway.url + "/v1/audio/transcriptions",
        files={"file": ("clip.wav", b"RIFF", "audio/wav")},
        timeout=30,
        headers=AUTH,
    )
    check_error(
        answer.status_code,
        answer.headers.get("x-request-id"),
        answer.content,
        400,
        "model_required",
    )
    assert env.sim.requests() == []


@pytest.mark.parametrize("status", [500, 503])
def test_internal_key_is_scrubbed_from_engine_errors(env: Env, status: int) -> None:
    answer = httpx.post(
        env.gateway.url + "/v1/chat/completions",
        json={"model": f"k{status}", "messages": HELLO},
        timeout=30,
        headers=AUTH,
    )
    assert answer.status_code == status
    assert answer.headers.get("x-request-id")
    assert INTERNAL_KEY.encode() not in answer.content
    message = answer.json()["error"]["message"]
    assert message == "rejected: got Authorization: Bearer [redacted]"
    assert int(answer.headers["content-length"]) == len(answer.content)
