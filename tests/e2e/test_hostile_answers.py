"""Answers an engine should not send: its own key echoed, compressed bodies, a gzip bomb.

A real engine process (``hostile_engine.py``) answers each request by the mode
named in its message. The internal key never reaches the client on any path
(error bodies plain or compressed, a retried 503, a large success written in
pieces, a stream's error event split across writes); compressed answers reach
the client intact with their Content-Encoding and are still charged their real
usage; a gzip bomb is refused without the gateway's memory following it, and
is charged its reservation.
"""

from __future__ import annotations

import gzip
import sqlite3
import sys
import zlib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from tests.e2e.conftest import model, write_config
from tests.e2e.raw_client import RawAnswer, raw_request, request_bytes

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import ServerProcess

pytestmark = pytest.mark.slow

INTERNAL_KEY = "sk-hostile-9f3c2a71d5e8"
ENGINE = Path(__file__).with_name("hostile_engine.py")


def hostile_engine() -> ServerProcess:
    return ServerProcess([sys.executable, str(ENGINE)], "hostile engine listening on ")


@dataclass(frozen=True, slots=True)
class Env:
    directory: Path
    gateway: GatewayProcess


def records(directory: Path) -> dict[str, list[int]]:
    """Each usage record of the gateway's SQLite store: request id → status, prompt
    tokens, completion tokens, estimated."""
    with sqlite3.connect(directory / "fairgate.db") as db:
        query = (
            "SELECT request_id, status, prompt_tokens, completion_tokens, estimated"
            " FROM usage_records"
        )
        return {request_id: rest for request_id, *rest in db.execute(query)}


def start(directory: Path, engine: ServerProcess, stack: ExitStack) -> GatewayProcess:
    key_file = directory / "engine.key"
    key_file.write_text(INTERNAL_KEY + "\n")
    upstream = [{"name": "r0", "url": engine.url, "key_file": str(key_file)}]
    config = write_config(
        directory,
        [model("h", upstreams=upstream)],
        limits={"max_response_bytes": 1 << 20},
        proxy={"retries": 1},
    )
    return stack.enter_context(GatewayProcess(config, stderr=directory / "gateway.log"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("gw")
    with ExitStack() as stack:
        engine = stack.enter_context(hostile_engine())
        yield Env(directory, start(directory, engine, stack))


def ask(
    gateway: GatewayProcess, mode: str, encoding: str | None = None, **extra: object
) -> RawAnswer:
    body = orjson.dumps(
        {"model": "h", "max_tokens": 3, "messages": [{"role": "user", "content": mode}], **extra}
    )
    headers = [("Content-Type", "application/json")]
    if encoding is not None:
        headers.append(("Accept-Encoding", encoding))
    return raw_request(
        gateway.url, request_bytes("POST", "/v1/chat/completions", headers=headers, body=body)
    )


def assert_no_key(answer: RawAnswer) -> None:
    """Neither in the bytes sent nor in them decompressed."""
    assert INTERNAL_KEY.encode() not in answer.body
    for name, value in answer.headers:
        assert INTERNAL_KEY not in name + value
    coding = (answer.header("content-encoding") or "").lower()
    if coding == "gzip":
        assert INTERNAL_KEY.encode() not in gzip.decompress(answer.body)
    elif coding == "deflate":
        assert INTERNAL_KEY.encode() not in zlib.decompress(answer.body)


@pytest.mark.parametrize(
    ("mode", "status"),
    [("gzip-error-key", 400), ("deflate-error-key", 400), ("gzip-503-key", 503)],
)
def test_a_compressed_error_quoting_the_key_is_relayed_decompressed_without_it(
    env: Env, mode: str, status: int
) -> None:
    answer = ask(env.gateway, mode, "gzip, deflate")
    assert answer.status == status
    assert answer.header("content-encoding") is None  # re-sent as plain bytes
    assert_no_key(answer)
    message = orjson.loads(answer.body)["error"]["message"]
    assert message == "invalid header Authorization: Bearer [redacted]"


def test_a_compressed_success_quoting_the_key_outside_its_compressed_text_is_scrubbed(
    env: Env,
) -> None:
    # the gzip header's file name and comment are sent as they are and dropped by
    # decompressing: the key there is in the bytes relayed, not in the text read
    answer = ask(env.gateway, "gzip-ok-key-in-header", "gzip")
    assert answer.status == 200
    assert_no_key(answer)
    assert answer.header("content-encoding") is None  # relayed decompressed
    assert orjson.loads(answer.body)["choices"][0]["message"]["content"] == "compressed"


def test_a_coding_quoting_the_key_is_refused_and_logged_without_it(env: Env) -> None:
    answer = ask(env.gateway, "coding-key", "gzip")
    assert answer.status == 502
    assert_no_key(answer)
    log = (env.directory / "gateway.log").read_text()
    assert "was not relayed: undecodable_answer" in log
    assert INTERNAL_KEY not in log and "x-[redacted]" in log


def test_a_coding_split_over_two_header_lines_is_not_taken_for_plain_bytes(env: Env) -> None:
    # "identity" then "gzip" is the list "identity, gzip": the body is gzip. Read as
    # plain (the first line only), it went out unscrubbed, for the client to gunzip.
    answer = ask(env.gateway, "two-codings-error-key", "gzip")
    assert answer.status == 502
    assert_no_key(answer)
    assert orjson.loads(answer.body)["error"]["message"] == "the model's answer could not be read"


def test_a_compressed_success_quoting_the_key_is_scrubbed(env: Env) -> None:
    answer = ask(env.gateway, "gzip-ok-key", "gzip")
    assert answer.status == 200
    assert_no_key(answer)
    document = orjson.loads(answer.body)
    assert document["choices"][0]["message"]["content"] == "my key is [redacted]"


def test_a_large_answer_written_in_pieces_is_scrubbed_everywhere(env: Env) -> None:
    answer = ask(env.gateway, "large-key")
    assert answer.status == 200
    assert len(answer.body) > 900 * 1024
    assert_no_key(answer)
    assert orjson.loads(answer.body)["choices"][0]["message"]["content"].count("[redacted]") == 5


def test_a_stream_error_event_split_across_writes_is_scrubbed(env: Env) -> None:
    answer = ask(env.gateway, "stream-key", "gzip", stream=True)
    assert answer.status == 200
    assert_no_key(answer)
    assert b"Bearer [redacted]" in answer.body


def test_the_content_type_relayed_is_scrubbed_too(env: Env) -> None:
    answer = ask(env.gateway, "content-type-key")
    assert answer.status == 200
    assert_no_key(answer)
    assert answer.header("content-type") == "application/json; charset=utf-8; key=[redacted]"


@pytest.mark.parametrize(("mode", "coding"), [("gzip-ok", "gzip"), ("deflate-ok", "deflate")])
def test_a_compressed_answer_is_relayed_intact(env: Env, mode: str, coding: str) -> None:
    answer = ask(env.gateway, mode, "gzip, deflate")
    assert answer.status == 200
    assert answer.header("content-encoding") == coding
    plain = gzip.decompress(answer.body) if coding == "gzip" else zlib.decompress(answer.body)
    document = orjson.loads(plain)
    assert document["choices"][0]["message"]["content"] == "compressed"
    assert document["usage"]["completion_tokens"] == 5


def test_a_compressed_stream_is_never_relayed(env: Env) -> None:
    answer = ask(env.gateway, "gzip-stream", "gzip", stream=True)
    assert answer.status == 502
    assert orjson.loads(answer.body)["error"]["message"] == "the model's answer could not be read"


def peak_memory(pid: int) -> int:
    """The process's peak resident memory in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_compressed_answers_are_charged_their_usage_and_a_bomb_its_reservation(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        engine = stack.enter_context(hostile_engine())
        gateway = start(tmp_path, engine, stack)
        ok = ask(gateway, "gzip-ok", "gzip")
        assert ok.status == 200 and ok.header("content-encoding") == "gzip"
        assert gateway.pid is not None
        before = peak_memory(gateway.pid)
        bomb = ask(gateway, "bomb", "gzip")
        after = peak_memory(gateway.pid)
        assert bomb.status == 502
        assert orjson.loads(bomb.body)["error"]["message"] == "the model's answer is too large"
        # 512 MiB decompressed would show; the copy stops at max_response_bytes (1 MiB)
        assert after - before < 64 << 20, (before, after)
        assert gateway.stop() == 0  # the recorder drains before the store closes
    rows = records(tmp_path)
    assert rows[ok.header("x-request-id")] == [200, 7, 5, 0]  # read from the compressed answer
    status, _prompt, completion, estimated = rows[bomb.header("x-request-id")]
    assert (status, completion, estimated) == (502, 3, 1)  # the reservation: never nothing


def test_a_usage_report_with_counts_that_are_no_counts_is_charged_the_reservation(
    tmp_path: Path,
) -> None:
    # a negative, a float or a number past 64 bits was read as 0 tokens: the request
    # went free while the engine generated for it
    modes = ("usage-negative", "usage-huge", "usage-float")
    with ExitStack() as stack:
        engine = stack.enter_context(hostile_engine())
        gateway = start(tmp_path, engine, stack)
        answers = {mode: ask(gateway, mode) for mode in modes}
        assert gateway.stop() == 0
    rows = records(tmp_path)
    for mode, answer in answers.items():
        assert answer.status == 200, (mode, answer.body)
        _status, _prompt, completion, estimated = rows[answer.header("x-request-id")]
        assert (completion, estimated) == (3, 1), mode  # the reservation, flagged


def test_a_later_smaller_usage_report_does_not_lower_the_charge(tmp_path: Path) -> None:
    # the last report used to win: a second usage chunk, or one after [DONE] in the same
    # write, charged 1 of the 10 tokens streamed
    modes = ("usage-twice", "usage-after-done")
    with ExitStack() as stack:
        engine = stack.enter_context(hostile_engine())
        gateway = start(tmp_path, engine, stack)
        answers = {mode: ask(gateway, mode, stream=True) for mode in modes}
        assert gateway.stop() == 0
    rows = records(tmp_path)
    for mode, answer in answers.items():
        assert answer.status == 200, (mode, answer.body)
        assert rows[answer.header("x-request-id")] == [200, 7, 10, 0], mode


def test_nothing_an_engine_sends_after_done_reaches_the_client(tmp_path: Path) -> None:
    # a token, an error event, a usage and a second [DONE] after the first [DONE], in its
    # write and in a later one, were all relayed: the client's stream went on past its end
    with ExitStack() as stack:
        engine = stack.enter_context(hostile_engine())
        gateway = start(tmp_path, engine, stack)
        answer = ask(gateway, "events-after-done", stream=True)
        assert gateway.stop() == 0
    assert answer.status == 200, answer.body
    assert answer.body.endswith(b"data: [DONE]\n\n")
    assert answer.body.count(b"[DONE]") == 1
    assert b"leaked" not in answer.body
    assert b"error" not in answer.body
    assert answer.body.count(b"tok ") == 3
    # charged the engine's report before [DONE], not estimated
    assert records(tmp_path)[answer.header("x-request-id")] == [200, 7, 3, 0]
