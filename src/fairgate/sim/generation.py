"""Serving one generation request: through the engine, or instantly with ``--speed 0``.

Streams send their headers at once and then one event per token as the engine
produces it (tokens that piled up while the client was slow go out together,
still one event each). The client leaving aborts the sequence at once, through
the ``Watch`` on ``receive``; so does an injected close, which then drops the
connection without the stream's terminator.

Counting: with the engine, a request is *finished* when its last token is
produced and *aborted* when it is dropped before; with ``--speed 0`` it is
finished on arrival. When the server shuts down, the engine aborts what it
holds: a stream then ends without its terminator, a whole answer becomes 503.
"""

from __future__ import annotations

import asyncio

from fairgate.core.errors import ServiceUnavailable
from fairgate.sim.asgi import Send, Watch, respond
from fairgate.sim.completions import with_usage
from fairgate.sim.faults import FaultPlan
from fairgate.sim.inputs import Generation
from fairgate.sim.kv_cache import root_hash
from fairgate.sim.output import OutputFormat, Usage
from fairgate.sim.sequence import SeqState, Sequence
from fairgate.sim.simulator import Simulator

__all__ = ["InjectedClose", "serve_generation"]

_STREAM_HEADERS = [(b"cache-control", b"no-cache")]
_HEALTHY = FaultPlan()


class InjectedClose(Exception):
    """Raised to make the server drop a connection mid-stream (a fault, not a bug)."""


async def serve_generation(
    sim: Simulator,
    send: Send,
    watch: Watch,
    gen: Generation,
    fmt: OutputFormat,
    plan: FaultPlan,
    request_id: str,
) -> None:
    """Answer ``gen`` on ``send`` in ``fmt``, suffering ``plan``; returns when done or gone."""
    finish = "length" if gen.explicit_max else "stop"
    if sim.engine is None:
        await _instant(sim, send, watch, gen, fmt, plan, finish)
        return
    engine = sim.engine
    event = asyncio.Event()
    seq = Sequence(
        request_id=request_id,
        priority=gen.priority or 0,
        arrival=asyncio.get_running_loop().time(),
        prompt=gen.prompt,
        max_tokens=gen.max_tokens,
        root=root_hash(gen.salt, gen.model),
        output_id=sim.tokenizer.output_id,
        notify=event.set,
    )
    if watch.gone.is_set():
        return
    if engine.closed:
        raise ServiceUnavailable("The engine is shutting down.")
    watch.on_gone = lambda: engine.abort(seq)
    watch.start()
    engine.submit(seq)
    try:
        if gen.stream:
            await _stream(sim, send, watch, gen, fmt, plan, finish, seq, event)
            return
        while not seq.done:
            await event.wait()
            event.clear()
        if seq.state is SeqState.FINISHED:
            sim.stats.finish(finish)
            await watch.sleep(plan.stall_before_first_token)
            if not watch.gone.is_set():
                await respond(send, 200, fmt.whole(_text(sim, seq), _usage(seq), finish))
        elif not watch.gone.is_set():
            raise ServiceUnavailable("The engine shut down before the request finished.")
    finally:
        if not seq.done:
            engine.abort(seq)
        engine.forget(seq)


async def _instant(
    sim: Simulator,
    send: Send,
    watch: Watch,
    gen: Generation,
    fmt: OutputFormat,
    plan: FaultPlan,
    finish: str,
) -> None:
    n = gen.max_tokens
    stats = sim.stats
    stats.started += 1
    stats.prompt_tokens += len(gen.prompt)
    stats.generation_tokens += n
    stats.finish(finish)
    usage = Usage(len(gen.prompt), n, 0)
    sim.inflight += 1
    try:
        if not gen.stream:
            await watch.sleep(plan.stall_before_first_token)
            await respond(send, 200, fmt.whole(sim.tokenizer.output_text(n), usage, finish))
        elif plan == _HEALTHY:
            piece = sim.tokenizer.output_piece
            events = [fmt.token(piece(i), i, None) for i in range(n - 1)]
            events.append(fmt.token(piece(n - 1), n - 1, finish))
            if gen.continuous_usage:
                prompt = len(gen.prompt)
                events = [with_usage(e, Usage(prompt, i + 1, 0)) for i, e in enumerate(events)]
            text = sim.tokenizer.output_text(n)
            events.append(fmt.closing(text, usage, finish, gen.include_usage))
            await _start_stream(send, fmt)
            await send({"type": "http.response.body", "body": b"".join(events)})
        else:
            watch.start()
            seq = Sequence("", 0, 0.0, gen.prompt, n, b"", sim.tokenizer.output_id)
            seq.generated, seq.state, seq.cached_tokens = n, SeqState.FINISHED, 0
            await _stream(sim, send, watch, gen, fmt, plan, finish, seq, asyncio.Event())
    finally:
        sim.inflight -= 1


async def _start_stream(send: Send, fmt: OutputFormat) -> None:
    headers = [(b"content-type", fmt.media_type), *_STREAM_HEADERS]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def _stream(
    sim: Simulator,
    send: Send,
    watch: Watch,
    gen: Generation,
    fmt: OutputFormat,
    plan: FaultPlan,
    finish: str,
    seq: Sequence,
    event: asyncio.Event,
) -> None:
    n = gen.max_tokens
    piece = sim.tokenizer.output_piece
    close_at = plan.close_mid_stream
    stall_at = plan.stall_mid_stream_after if plan.stall_mid_stream else None
    await _start_stream(send, fmt)
    await watch.sleep(plan.stall_before_first_token)
    sent = 0
    while True:
        event.clear()
        if watch.gone.is_set():
            return
        if seq.state is SeqState.ABORTED:
            # the engine shut down: end the body cleanly, without the terminator
            await send({"type": "http.response.body", "body": b""})
            return
        out: list[bytes] = []
        for i in range(sent, seq.generated):
            if i in (close_at, stall_at):
                await _flush(send, out)
                await _fault(sim, watch, plan, seq, i)
            token = fmt.token(piece(i), i, finish if i == n - 1 else None)
            if gen.continuous_usage:
                token = with_usage(token, Usage(len(seq.prompt), i + 1, max(seq.cached_tokens, 0)))
            out.append(token)
        sent = seq.generated
        await _flush(send, out)
        if seq.state is SeqState.FINISHED and sent == n:
            break
        await event.wait()
    if sim.engine is not None:
        sim.stats.finish(finish)
    # Faults due at or past the end happen before the terminator.
    if close_at is not None or (stall_at is not None and stall_at >= n):
        await _fault(sim, watch, plan, seq, max(n, close_at or 0))
    if not watch.gone.is_set():
        text = sim.tokenizer.output_text(n)
        closing = fmt.closing(text, _usage(seq), finish, gen.include_usage)
        await send({"type": "http.response.body", "body": closing})


async def _fault(sim: Simulator, watch: Watch, plan: FaultPlan, seq: Sequence, index: int) -> None:
    """Apply the mid-stream fault due before token ``index``."""
    if plan.close_mid_stream is not None and index >= plan.close_mid_stream:
        if sim.engine is not None and not seq.done:
            sim.engine.abort(seq)
        raise InjectedClose(f"connection closed after {index} tokens (injected fault)")
    if plan.stall_mid_stream and index >= plan.stall_mid_stream_after:
        await watch.sleep(plan.stall_mid_stream)


async def _flush(send: Send, out: list[bytes]) -> None:
    if out:
        await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
        out.clear()


def _text(sim: Simulator, seq: Sequence) -> str:
    return sim.tokenizer.output_text(seq.generated)


def _usage(seq: Sequence) -> Usage:
    return Usage(len(seq.prompt), seq.generated, max(seq.cached_tokens, 0))
