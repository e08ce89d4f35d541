"""An engine that answers llama-server's OpenAI routes the way llama-server does for a batch.

Run as a process (``python llama_batch_engine.py``); it prints
``llama batch engine listening on http://127.0.0.1:PORT`` once it listens.

llama-server runs one task per prompt of a ``prompt`` list and per choice
(``n_cmpl``, else ``n``), and each task counts its own tokens. Its answer to
several tasks on ``/v1/completions`` and ``/v1/chat/completions`` keeps the
first task's object with every task's choice appended to its ``choices``: the
``usage`` is the first task's alone. A stream sends each task's events, each
task's last one (completions) or a chunk of its own (chat, with
``stream_options.include_usage``) carrying that task's usage, then
``data: [DONE]``. Every task here generates its full ``max_tokens``
(``n_predict`` first), one word a token, and its prompt counts a token a word.

``GET /stats`` answers the tokens generated so far, as the engine's own count.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from aiohttp import web

_GENERATED = {"prompt_tokens": 0, "completion_tokens": 0}


def _tasks(body: dict[str, Any], chat: bool) -> list[int]:
    """The prompt tokens of each task, in task order."""
    if chat:
        prompts = [" ".join(str(m.get("content", "")) for m in body["messages"])]
    else:
        prompt = body["prompt"]
        prompts = prompt if isinstance(prompt, list) else [prompt]
    choices = int(body.get("n_cmpl", body.get("n", 1)))
    return [len(str(p).split()) for p in prompts for _ in range(choices)]


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "completion_tokens": completion,
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
    }


def _object(chat: bool, index: int, text: str, prompt: int, completion: int) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        "id": "cmpl-batch",
        "object": "chat.completion" if chat else "text_completion",
        "model": "l",
        "choices": [choice],
        "usage": _usage(prompt, completion),
    }


def _chunk(chat: bool, index: int, text: str | None, finish: str | None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": index, "finish_reason": finish}
    if chat:
        choice["delta"] = {} if text is None else {"content": text}
    else:
        choice["text"] = text or ""
    return {
        "id": "cmpl-batch",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "model": "l",
        "choices": [choice],
    }


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


async def _answer(request: web.Request, chat: bool) -> web.StreamResponse:
    body = await request.json()
    cap = int(body.get("n_predict", body.get("max_tokens", 16)))
    tasks = _tasks(body, chat)
    for prompt in tasks:
        _GENERATED["prompt_tokens"] += prompt
        _GENERATED["completion_tokens"] += cap
    text = " ".join(["tok"] * cap)
    if not body.get("stream"):
        first = _object(chat, 0, text, tasks[0], cap)
        for index in range(1, len(tasks)):
            first["choices"].append(_object(chat, index, text, tasks[index], cap)["choices"][0])
        return web.json_response(first)
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    usage_chunk = bool(body.get("stream_options", {}).get("include_usage"))
    for index, prompt in enumerate(tasks):
        for _ in range(cap):
            await response.write(_event(_chunk(chat, index, "tok ", None)))
        last = _chunk(chat, index, None, "length")
        if not chat:
            last["usage"] = _usage(prompt, cap)
        await response.write(_event(last))
        if chat and usage_chunk:
            end = {"id": "cmpl-batch", "object": "chat.completion.chunk", "model": "l"}
            await response.write(_event({**end, "choices": [], "usage": _usage(prompt, cap)}))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def completions(request: web.Request) -> web.StreamResponse:
    return await _answer(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _answer(request, chat=True)


async def stats(_request: web.Request) -> web.Response:
    return web.json_response(_GENERATED)


async def health(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def metrics(_request: web.Request) -> web.Response:
    return web.Response(text="")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/stats", stats)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)

    async def serve() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        print(f"llama batch engine listening on http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
