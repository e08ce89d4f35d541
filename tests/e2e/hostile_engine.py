"""An engine that misbehaves on purpose: it echoes its API key and compresses what it likes.

Run as a process (``python hostile_engine.py``); it prints
``hostile engine listening on http://127.0.0.1:PORT`` once it listens. Every
``POST /v1/chat/completions`` is answered by the mode named in the first
message's content; the key echoed is the one the gateway presented in
``Authorization``. Modes:

    gzip-ok / deflate-ok   a completion with usage 7 + 5, compressed
    gzip-ok-key            the same, the key quoted in the answer
    gzip-error-key         400, the key quoted, gzip
    deflate-error-key      400, the key quoted, deflate
    gzip-503-key           503, the key quoted, gzip (the gateway retries, then relays it)
    large-key              a 900 KiB completion quoting the key five times, written in
                           pieces cut in the middle of each key
    stream-key             an SSE stream whose error event quotes the key, split across writes
    gzip-stream            an SSE stream sent gzip although identity was asked for
    content-type-key       a completion whose Content-Type quotes the key
    gzip-ok-key-in-header  a gzip success whose plain text is clean, the key written in
                           the gzip header's file name and comment (bytes that are not
                           compressed and that decompressing drops)
    coding-key             a success whose Content-Encoding (no coding at all) quotes the key
    two-codings-error-key  400, the key quoted, gzip, its coding in two header lines
                           (``identity`` then ``gzip``: together they mean gzip)
    bomb                   512 MiB of zeros as 0.5 MiB of gzip
    usage-negative         a completion reporting -5 completion tokens
    usage-huge             a completion reporting 10^30 completion tokens (a float to a
                           JSON parser)
    usage-float            a completion reporting 5.0 completion tokens
    usage-twice            a stream of 10 tokens reporting usage 7 + 10, then 7 + 1
    usage-after-done       a stream of 10 tokens reporting usage 7 + 10, ``[DONE]``, then
                           usage 7 + 1 in the same write
    events-after-done      a stream of 3 tokens reporting usage 7 + 3, ``[DONE]``, then in
                           the same write and in a later one: a token ``leaked``, an error
                           event, a usage of 7 + 1 and a second ``[DONE]``
"""

from __future__ import annotations

import asyncio
import gzip
import json
import struct
import sys
import zlib

from aiohttp import web

USAGE = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}


def completion(text: str) -> bytes:
    message = {"role": "assistant", "content": text}
    return json.dumps(
        {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "model": "h",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": USAGE,
        }
    ).encode()


def error(key: str) -> bytes:
    message = f"invalid header Authorization: Bearer {key}"
    return json.dumps({"error": {"message": message, "type": "BadRequestError"}}).encode()


def _bomb() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(512)) + packer.flush()


BOMB = _bomb()


def _gzip_header_quoting(key: str, data: bytes) -> bytes:
    """A gzip member of ``data`` whose header carries ``key`` as FNAME and FCOMMENT."""
    header = b"\x1f\x8b\x08" + bytes([0x08 | 0x10]) + b"\0\0\0\0\0\xff"
    header += key.encode() + b"\0" + key.encode() + b"\0"
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    trailer = struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)
    return header + packer.compress(data) + packer.flush() + trailer


def _plain(status: int, body: bytes, coding: str | None = None) -> web.Response:
    response = web.Response(status=status, body=body, content_type="application/json")
    if coding is not None:
        response.headers["Content-Encoding"] = coding
    return response


async def _pieces(
    request: web.Request, body: bytes, cuts: list[int], **headers: str
) -> web.StreamResponse:
    """``body`` written chunked, one chunk between consecutive ``cuts``."""
    response = web.StreamResponse(status=200, headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
        await response.write(body[start:end])
        await asyncio.sleep(0.01)  # separate reads on the gateway's side
    await response.write_eof()
    return response


def _mid_key_cuts(body: bytes, key: str) -> list[int]:
    """A cut in the middle of every occurrence of ``key``."""
    cuts, at = [], body.find(key.encode())
    while at >= 0:
        cuts.append(at + len(key) // 2)
        at = body.find(key.encode(), at + 1)
    return cuts


async def _stream_key(request: web.Request, key: str) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    delta = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    await response.write(b"data: " + json.dumps(delta).encode() + b"\n\n")
    event = b"data: " + error(key) + b"\n\n"
    half = event.index(key.encode()) + len(key) // 2
    await response.write(event[:half])
    await asyncio.sleep(0.05)  # a separate read on the gateway's side
    await response.write(event[half:])
    await response.write_eof()
    return response


async def _usage_twice(request: web.Request, after_done: bool) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    delta = {"choices": [{"index": 0, "delta": {"content": "tok "}}]}
    for _ in range(10):
        await response.write(b"data: " + json.dumps(delta).encode() + b"\n\n")

    def usage(completion: int) -> bytes:
        report = {"prompt_tokens": 7, "completion_tokens": completion}
        return b"data: " + json.dumps({"choices": [], "usage": report}).encode() + b"\n\n"

    done = b"data: [DONE]\n\n"
    tail = usage(10) + done + usage(1) if after_done else usage(10) + usage(1) + done
    await response.write(tail)
    await response.write_eof()
    return response


async def _events_after_done(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)

    def event(body: object) -> bytes:
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def token(text: str) -> bytes:
        return event({"choices": [{"index": 0, "delta": {"content": text}}]})

    usage = {"prompt_tokens": 7, "completion_tokens": 3}
    for _ in range(3):
        await response.write(token("tok "))
    done = b"data: [DONE]\n\n"
    after = (
        token("leaked")
        + event({"error": {"message": "late", "type": "server_error"}})
        + event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 1}})
        + done
    )
    await response.write(event({"choices": [], "usage": usage}) + done + after)
    await response.write(after)
    await response.write_eof()
    return response


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    mode = body["messages"][0]["content"]
    key = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if mode == "gzip-ok":
        return _plain(200, gzip.compress(completion("compressed")), "gzip")
    if mode == "deflate-ok":
        return _plain(200, zlib.compress(completion("compressed")), "deflate")
    if mode == "gzip-ok-key":
        return _plain(200, gzip.compress(completion(f"my key is {key}")), "gzip")
    if mode == "gzip-error-key":
        return _plain(400, gzip.compress(error(key)), "gzip")
    if mode == "deflate-error-key":
        return _plain(400, zlib.compress(error(key)), "deflate")
    if mode == "gzip-503-key":
        return _plain(503, gzip.compress(error(key)), "gzip")
    if mode == "large-key":
        filler = "x" * (150 * 1024)
        answer = completion(key.join([filler] * 6))
        cuts = _mid_key_cuts(answer, key)
        return await _pieces(request, answer, cuts, **{"Content-Type": "application/json"})
    if mode == "stream-key":
        return await _stream_key(request, key)
    if mode == "gzip-stream":
        event = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
        headers = {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}
        return await _pieces(request, gzip.compress(event), [], **headers)
    if mode == "content-type-key":
        response = web.Response(status=200, body=completion("plain"))
        response.headers["Content-Type"] = f"application/json; charset=utf-8; key={key}"
        return response
    if mode == "gzip-ok-key-in-header":
        return _plain(200, _gzip_header_quoting(key, completion("compressed")), "gzip")
    if mode == "coding-key":
        return _plain(200, completion("plain"), f"x-{key}")
    if mode == "two-codings-error-key":
        response = _plain(400, gzip.compress(error(key)))
        response.headers.add("Content-Encoding", "identity")
        response.headers.add("Content-Encoding", "gzip")
        return response
    if mode == "bomb":
        return _plain(200, BOMB, "gzip")
    if mode == "events-after-done":
        return await _events_after_done(request)
    if mode in ("usage-twice", "usage-after-done"):
        return await _usage_twice(request, mode == "usage-after-done")
    if mode.startswith("usage-"):
        count = {"usage-negative": "-5", "usage-huge": "1" + "0" * 30, "usage-float": "5.0"}
        answer = completion("plain").replace(
            b'"completion_tokens": 5', b'"completion_tokens": ' + count[mode].encode()
        )
        return _plain(200, answer)
    return _plain(200, completion("plain"))


async def health(_request: web.Request) -> web.Response:
    return web.Response(text="")


def main() -> None:
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", health)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        print(f"hostile engine listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
