"""The upstream client: no environment proxies, no redirects, nothing added."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from fairgate.engines import adapter_for
from fairgate.upstream import Breaker, Replica, UpstreamSessions, read_bounded

from .conftest import FakeEngine, StartEngine


def _replica(engine: FakeEngine, kind: str = "vllm") -> Replica:
    return Replica("r", "m", engine.url, 1, "sk-internal", adapter_for(kind), Breaker())


def _headers(replica: Replica) -> list[tuple[bytes, bytes]]:
    return replica.adapter.headers(
        internal_key=replica.internal_key,
        content_type=b"application/json",
        accept=b"application/json",
        request_id="req-1",
        priority=4,
        host=replica.host_header,
    )


@pytest.fixture
async def sessions() -> AsyncIterator[UpstreamSessions]:
    sessions = UpstreamSessions(connect_timeout=10.0)
    yield sessions
    await sessions.close()


async def test_environment_proxies_are_ignored(
    start_engine: StartEngine, sessions: UpstreamSessions, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, proxy = await start_engine(), await start_engine()
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.url)

    # Control: a client that trusts the environment goes through the proxy.
    async with (
        aiohttp.ClientSession(trust_env=True) as trusting,
        trusting.get(f"{target.url}/control") as response,
    ):
        await response.read()
    assert len(proxy.seen) == 1

    replica = _replica(target)
    async with sessions.request(replica, "POST", "/v1/completions", headers=_headers(replica)):
        pass
    assert target.paths() == ["/v1/completions"]
    assert len(proxy.seen) == 1


async def test_redirects_are_not_followed(
    start_engine: StartEngine, sessions: UpstreamSessions
) -> None:
    engine, elsewhere = await start_engine(), await start_engine()

    async def redirect(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{elsewhere.url}/steal")

    engine.reply = redirect
    replica = _replica(engine)
    async with sessions.request(
        replica, "POST", "/v1/chat/completions", headers=_headers(replica), data=b"{}"
    ) as response:
        assert response.status == 302
        assert response.headers["Location"] == f"{elsewhere.url}/steal"
    assert elsewhere.seen == []  # the internal key never went there


async def test_only_the_adapters_headers_are_sent(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    replica = _replica(engine)
    async with sessions.request(
        replica, "POST", "/v1/completions", headers=_headers(replica), data=b'{"a":1}'
    ) as response:
        assert response.status == 200
    seen = engine.seen[-1]
    assert seen.body == b'{"a":1}'
    assert {name.lower() for name in seen.headers} == {
        "host",
        "content-type",
        "accept",
        "authorization",
        "x-request-id",
        "x-vllm-priority",
        "accept-encoding",
        "content-length",
    }
    assert seen.headers["Authorization"] == "Bearer sk-internal"
    assert seen.headers["Accept-Encoding"] == "identity"


async def test_no_cookies_are_kept(engine: FakeEngine, sessions: UpstreamSessions) -> None:
    async def set_cookie(request: web.Request) -> web.StreamResponse:
        response = web.Response(text="ok")
        response.set_cookie("session", "engine-secret")
        return response

    engine.reply = set_cookie
    # A host name: aiohttp's default jar would not store cookies of an IP address.
    replica = Replica(
        "r", "m", f"http://localhost:{engine.port}", 1, None, adapter_for("vllm"), Breaker()
    )
    for _ in range(2):
        async with sessions.request(replica, "POST", "/v1/completions", headers=_headers(replica)):
            pass
    assert all("Cookie" not in seen.headers for seen in engine.seen)


async def test_compressed_answers_are_relayed_as_sent(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    payload = gzip.compress(b'{"usage":{}}')

    async def gzipped(request: web.Request) -> web.StreamResponse:
        return web.Response(body=payload, headers={"Content-Encoding": "gzip"})

    engine.reply = gzipped
    replica = _replica(engine)
    async with sessions.request(
        replica, "POST", "/v1/completions", headers=_headers(replica)
    ) as response:
        assert await read_bounded(response, 1 << 20) == payload


async def test_read_bounded_refuses_an_oversized_body(
    engine: FakeEngine, sessions: UpstreamSessions
) -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"x" * 300_000)

    engine.reply = big
    replica = _replica(engine)
    async with sessions.request(replica, "POST", "/x", headers=_headers(replica)) as response:
        assert await read_bounded(response, 200_000) is None


async def test_connection_errors_surface_as_client_errors(
    closed_port: int, sessions: UpstreamSessions
) -> None:
    replica = Replica(
        "r", "m", f"http://127.0.0.1:{closed_port}", 1, None, adapter_for("openai"), Breaker()
    )
    with pytest.raises(aiohttp.ClientConnectionError):
        await sessions.send(replica, "GET", "/v1/models", headers=_headers(replica))


async def test_one_shared_session_reopened_after_close(engine: FakeEngine) -> None:
    sessions = UpstreamSessions(connect_timeout=5.0, limit_per_host=4)
    first = sessions.session_for(_replica(engine))
    assert sessions.session_for(_replica(engine, "openai")) is first
    await sessions.close()
    assert first.closed
    second = sessions.session_for(_replica(engine))
    assert second is not first
    await sessions.close()
