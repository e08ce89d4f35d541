"""One attempt on a real engine connection and the relay of its answer (``proxy.relay``).

The engine is a TCP server in the test that writes the HTTP/1.1 answer it is given
(and may break it off), read by the gateway's own upstream pool.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

import orjson
import pytest
from tests.proxy.asgi_client import Client

from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.relay import DRAIN_SECONDS, AttemptFailed, Deadlines, Relay
from fairgate.proxy.reservation import Reservation, charge
from fairgate.proxy.usage import Usage
from fairgate.upstream import UpstreamPool

DEADLINES = Deadlines(
    connect=5,
    headers=5,
    first_token=5,
    idle=5,
    total=10,
    slow_reader=5,
    max_response_bytes=4096,
)


@dataclass(frozen=True)
class Engine:
    host: str
    port: int
    tls: bool = False
    internal_key: str | None = None


Serve = Callable[..., Awaitable[Engine]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """``await serve(answer, hold=False)``: an engine that reads one request and writes
    ``answer`` (then holds the connection open when ``hold``, else closes it)."""
    servers: list[asyncio.Server] = []
    release = asyncio.Event()

    async def start(answer: bytes, *, hold: bool = False) -> Engine:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(answer)
            await writer.drain()
            if hold:
                await release.wait()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return Engine("127.0.0.1", server.sockets[0].getsockname()[1])

    yield start
    release.set()
    for server in servers:
        server.close()
        await server.wait_closed()


def plain(status: int, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        content_type,
        len(body),
        body,
    )


def chunked_stream(*events: bytes) -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events)


def content(text: str) -> bytes:
    return (
        b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + b"\n\n"
    )


def exchange(*, stream: bool) -> Exchange:
    ex = Exchange("r1", "POST", "/v1/chat/completions", time.monotonic(), stream=stream)
    ex.endpoint = "/v1/chat/completions"
    ex.reservation = Reservation(prompt_tokens=250, completion_tokens=64)
    return ex


async def attempt(
    engine: Engine, ex: Exchange, deadlines: Deadlines = DEADLINES
) -> tuple[Client, Exchange]:
    pool = UpstreamPool(connect_timeout=5)
    relay = Relay(deadlines, pool)
    client = Client()
    headers = [(b"host", b"engine"), (b"content-type", b"application/json")]
    try:
        opened = await relay.open(ex, engine, b"/v1/chat/completions", headers, b"{}")
        ex.replica = "r0"
        if opened.streaming:
            await relay.stream(ex, opened, client.send, [], strip_usage=False)
        else:
            await relay.send_whole(ex, opened, client.send, [])
    finally:
        await pool.close()
    return client, ex


async def test_a_plain_answers_usage_is_read_from_its_body(serve: Serve) -> None:
    body = orjson.dumps(
        {
            "id": "c1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
        }
    )
    client, ex = await attempt(await serve(plain(200, body)), exchange(stream=False))
    assert (client.status, client.body) == (200, body)
    assert ex.usage == Usage(12, 5)
    charge(ex)
    assert ex.usage == Usage(12, 5)  # the engine's figures, not the reservation


async def test_a_plain_answer_without_usage_is_charged_its_reservation(serve: Serve) -> None:
    body = b'{"id":"c1","choices":[]}'
    client, ex = await attempt(await serve(plain(200, body)), exchange(stream=False))
    assert client.body == body
    assert ex.usage is None
    charge(ex)
    assert ex.usage == Usage(250, 64, estimated=True)


async def test_a_stream_cut_by_the_engine_is_charged_its_reservation_flagged_estimated(
    serve: Serve,
) -> None:
    # two tokens, then the engine closes the connection: no usage, no [DONE]
    engine = await serve(chunked_stream(content("a"), content("b")))
    client, ex = await attempt(engine, exchange(stream=True))
    assert client.status == 200
    assert client.body.startswith(content("a") + content("b"))
    assert b"[DONE]" not in client.body
    assert b'"error"' in client.body  # the client is told the stream broke off
    assert ex.outcome == Outcome.TRUNCATED
    assert ex.usage is None
    charge(ex)
    assert ex.usage == Usage(250, 64, estimated=True)


def counted(text: str, completion: int) -> bytes:
    """A token event with the usage so far on it (vLLM's ``continuous_usage_stats``)."""
    usage = {"prompt_tokens": 7, "completion_tokens": completion}
    chunk = {"choices": [{"index": 0, "delta": {"content": text}}], "usage": usage}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def test_a_stream_cut_off_after_running_counts_is_charged_its_reservation(
    serve: Serve,
) -> None:
    """The last count seen is what the engine had told the gateway so far, not what it
    generated: cut off before its end, the stream is charged its reservation."""
    engine = await serve(chunked_stream(counted("a", 1), counted("b", 2)))
    client, ex = await attempt(engine, exchange(stream=True))
    assert b"[DONE]" not in client.body
    charge(ex)
    assert ex.usage == Usage(250, 64, estimated=True)


async def test_a_whole_stream_with_running_counts_is_charged_its_last_count(
    serve: Serve,
) -> None:
    events = (counted("a", 1), counted("b", 2), b"data: [DONE]\n\n")
    engine = await serve(chunked_stream(*events) + b"0\r\n\r\n")
    _, ex = await attempt(engine, exchange(stream=True))
    assert ex.outcome == Outcome.OK
    charge(ex)
    assert ex.usage == Usage(7, 2)


def llama_token(index: int, text: str) -> bytes:
    return b"data: " + orjson.dumps({"index": index, "content": text, "stop": False}) + b"\n\n"


def llama_stop(index: int, prompt: int, predicted: int | None) -> bytes:
    """llama-server's native event ending one sequence of a batch (None: no counts)."""
    event: dict[str, object] = {"index": index, "content": "", "stop": True}
    if predicted is not None:
        event.update(tokens_evaluated=prompt, tokens_predicted=predicted)
    return b"data: " + orjson.dumps(event) + b"\n\n"


def batch(sequences: int) -> Exchange:
    """A native llama-server stream of ``sequences`` prompts (``/completion``)."""
    ex = exchange(stream=True)
    ex.sequences = sequences
    return ex


async def test_a_llama_batch_stream_ends_with_its_last_sequence_and_is_charged_them_all(
    serve: Serve,
) -> None:
    """Each prompt of a native batch ends with a stop event: the first one is not the
    stream's end (the record was made there, and the other prompts went uncharged)."""
    events = (llama_token(0, "a"), llama_stop(0, 3, 1), llama_token(1, "b"), llama_stop(1, 4, 2))
    engine = await serve(chunked_stream(*events) + b"0\r\n\r\n")
    client, ex = await attempt(engine, batch(2))
    assert client.body == b"".join(events)
    assert ex.ending and ex.stops == 1
    charge(ex)
    assert ex.usage == Usage(7, 3)


@pytest.mark.parametrize(
    "events",
    [
        (llama_token(0, "a"), llama_stop(0, 3, 1), llama_token(1, "b")),  # cut off
        (llama_stop(0, 3, 1), llama_stop(1, 4, None)),  # a sequence without its counts
    ],
    ids=["cut-after-one-prompt", "a-stop-without-counts"],
)
async def test_a_llama_batch_stream_short_of_a_sequences_counts_is_charged_its_reservation(
    serve: Serve, events: tuple[bytes, ...]
) -> None:
    engine = await serve(chunked_stream(*events) + b"0\r\n\r\n")
    _, ex = await attempt(engine, batch(2))
    charge(ex)
    assert ex.usage == Usage(250, 64, estimated=True)


async def test_a_whole_stream_is_charged_its_reported_usage(serve: Serve) -> None:
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n'
    engine = await serve(chunked_stream(content("a"), usage, b"data: [DONE]\n\n") + b"0\r\n\r\n")
    client, ex = await attempt(engine, exchange(stream=True))
    assert client.body == content("a") + usage + b"data: [DONE]\n\n"
    assert ex.outcome == Outcome.OK
    charge(ex)
    assert ex.usage == Usage(7, 2)


async def test_an_engine_that_holds_its_stream_open_after_done_cannot_hold_the_client(
    serve: Serve,
) -> None:
    # the relay read on after [DONE] until the idle deadline, then wrote an error event
    # after the client's [DONE] and recorded the stream as timed out
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}\n\n'
    done = b"data: [DONE]\n\n"
    engine = await serve(chunked_stream(content("a"), usage, done, content("late")), hold=True)
    # nor hold the request (its replica, its seat) for the idle deadline: the drain after
    # [DONE] is bounded on its own (DRAIN_SECONDS), then the connection is closed
    idle = 20 * DRAIN_SECONDS
    started = time.monotonic()
    client, ex = await attempt(
        engine, exchange(stream=True), replace(DEADLINES, idle=idle, total=2 * idle)
    )
    assert time.monotonic() - started < idle / 2
    assert client.body == content("a") + usage + done
    assert ex.outcome == Outcome.OK
    charge(ex)
    assert ex.usage == Usage(7, 2)


async def test_a_responses_stream_ends_at_its_final_event_as_a_chat_stream_at_done(
    serve: Serve,
) -> None:
    # The Responses API's stream has no [DONE]: its response.completed is the last event.
    # An engine that held the stream open after it kept the request (its replica, its
    # places) until the idle deadline, then an error event followed the final one.
    def event(kind: str, body: dict[str, object]) -> bytes:
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    delta = event(
        "response.output_text.delta", {"type": "response.output_text.delta", "delta": "a"}
    )
    usage = {"input_tokens": 7, "output_tokens": 2, "total_tokens": 9}
    final = event(
        "response.completed",
        {"type": "response.completed", "response": {"id": "resp_1", "usage": usage}},
    )
    late = event("response.output_text.delta", {"type": "response.output_text.delta", "delta": "z"})
    engine = await serve(chunked_stream(delta, final, late), hold=True)
    ex = exchange(stream=True)
    ex.path = ex.endpoint = "/v1/responses"
    idle = 20 * DRAIN_SECONDS
    started = time.monotonic()
    client, ex = await attempt(engine, ex, replace(DEADLINES, idle=idle, total=2 * idle))
    assert time.monotonic() - started < idle / 2
    assert client.body == delta + final
    assert ex.outcome == Outcome.OK
    charge(ex)
    assert ex.usage == Usage(7, 2)


async def test_an_engines_503_is_retried_elsewhere_and_its_answer_kept(serve: Serve) -> None:
    body = b'{"error":{"message":"overloaded"}}'
    with pytest.raises(AttemptFailed) as failed:
        await attempt(await serve(plain(503, body)), exchange(stream=False))
    assert failed.value.retryable
    assert failed.value.replica_at_fault  # the breaker counts it against the replica
    assert failed.value.answer == (503, b"application/json", body)
    assert not failed.value.ran  # it answered: nothing to charge for this attempt


async def test_an_answer_over_the_size_bound_is_not_the_replicas_fault(serve: Serve) -> None:
    body = b'{"x":"' + b"a" * 5000 + b'"}'
    with pytest.raises(AttemptFailed) as failed:
        await attempt(await serve(plain(200, body)), exchange(stream=False))
    assert failed.value.reason == "response_too_large"
    assert not failed.value.retryable
    assert not failed.value.replica_at_fault  # the request asked for too much
    assert failed.value.ran  # the engine generated it: charged the reservation


async def test_the_requests_own_deadline_running_out_is_not_the_replicas_fault(
    serve: Serve,
) -> None:
    silent = await serve(b"", hold=True)  # reads the request, never answers
    ex = exchange(stream=False)
    ex.started -= DEADLINES.total - 0.2  # the request has 0.2 s of its total left
    with pytest.raises(AttemptFailed) as failed:
        await attempt(silent, ex)
    assert failed.value.reason == "total_timeout"
    assert not failed.value.replica_at_fault
    assert failed.value.ran  # sent: the engine may be generating, charged


@pytest.mark.parametrize("stream", [True, False])
async def test_an_engine_slower_than_the_headers_deadline_is_at_fault_for_a_stream(
    serve: Serve, stream: bool
) -> None:
    # A plain answer's headers come with the whole answer, as long as the client
    # asked for: only a stream's late headers say the engine is stuck.
    silent = await serve(b"", hold=True)
    short = replace(DEADLINES, headers=0.2)
    with pytest.raises(AttemptFailed) as failed:
        await attempt(silent, exchange(stream=stream), short)
    assert failed.value.reason == "headers_timeout"
    assert failed.value.retryable
    assert failed.value.replica_at_fault is stream
