"""``fairgate sim``: flags → SimConfig → the simulated engine. No logic of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fairgate.core.durations import parse_duration

__all__ = ["HELP", "sim"]

HELP = """Run a simulated vLLM engine (no GPU) on a real HTTP port.

It serves the OpenAI routes (/v1/chat/completions, /v1/completions, /v1/embeddings,
/v1/responses, /v1/models), /health and /metrics with vLLM's metric names, schedules
requests like vLLM v1 (waiting heap on (priority, arrival), KV blocks, preemption of the
largest (priority, arrival), prefix caching salted by cache_salt) and streams at a set
token rate. /sim/requests, /sim/stats, /sim/batch, /sim/faults and /sim/reset are test and debugging
endpoints without authentication: keep the simulator on loopback.

Once listening it prints one line to stdout, "fairgate sim listening on http://HOST:PORT".
Durations accept seconds ("0.5") or units ("500ms", "2s").
"""

_FAULTS = "Faults"
_ENGINE = "Engine model"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        try:
            value = parse_duration(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    if value < 0:
        raise typer.BadParameter("must be >= 0")
    return value


def sim(
    port: Annotated[int, typer.Option(help="TCP port to listen on; 0 picks a free one.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    model: Annotated[
        list[str] | None,
        typer.Option(help="Served model name; repeat for several (one engine serves them all)."),
    ] = None,
    speed: Annotated[
        float,
        typer.Option(
            "--speed",
            "--tokens-per-second",
            help="Tokens per second per running sequence (the step rate). "
            "0 answers instantly: no scheduler, no KV cache, no sleeps (overhead benchmarks).",
            rich_help_panel=_ENGINE,
        ),
    ] = 30.0,
    ttft: Annotated[
        str,
        typer.Option(
            help="Prefill time of a prompt with nothing cached (the cached fraction is skipped); "
            "the first token follows at the next step.",
            rich_help_panel=_ENGINE,
        ),
    ] = "0.1",
    max_num_seqs: Annotated[
        int,
        typer.Option(
            help="Batch capacity: most sequences running at once.", rich_help_panel=_ENGINE
        ),
    ] = 256,
    kv_blocks: Annotated[
        int, typer.Option(help="KV cache size in blocks.", rich_help_panel=_ENGINE)
    ] = 4096,
    block_size: Annotated[
        int, typer.Option(help="Tokens per KV block.", rich_help_panel=_ENGINE)
    ] = 16,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            help="Longest prompt + completion in tokens (default: the whole KV cache).",
            rich_help_panel=_ENGINE,
        ),
    ] = None,
    max_tokens_default: Annotated[
        int,
        typer.Option(
            help="Output length when a request sets no max_tokens (finish reason 'stop').",
            rich_help_panel=_ENGINE,
        ),
    ] = 64,
    eos_after: Annotated[
        int | None,
        typer.Option(
            help="End every answer after this many tokens (finish reason 'stop'), as a model "
            "reaching its end-of-sequence token does; a body's ignore_eos overrides it.",
            rich_help_panel=_ENGINE,
        ),
    ] = None,
    scheduling_policy: Annotated[
        str,
        typer.Option(
            help="priority (default here; vLLM's own default is fcfs) or fcfs, which rejects "
            "a non-zero priority with 400 as vLLM does.",
            rich_help_panel=_ENGINE,
        ),
    ] = "priority",
    prefix_caching: Annotated[
        bool,
        typer.Option(help="Reuse KV blocks of shared prompt prefixes.", rich_help_panel=_ENGINE),
    ] = True,
    api_key: Annotated[
        str | None,
        typer.Option(help="Require 'Authorization: Bearer KEY' on /v1 routes, like vLLM."),
    ] = None,
    api_key_file: Annotated[
        Path | None,
        typer.Option(help="Read the API key from this file instead (keeps it out of ps)."),
    ] = None,
    personality: Annotated[
        str,
        typer.Option(
            help="vllm, or llama-server: adds /slots, /props, /completion, /infill and "
            "llamacpp:* metric names, ignores priorities."
        ),
    ] = "vllm",
    record: Annotated[
        int, typer.Option(help="How many requests /sim/requests keeps (0: none).")
    ] = 256,
    seed: Annotated[int, typer.Option(help="Seed of the generated text and embeddings.")] = 0,
    embedding_dim: Annotated[int, typer.Option(help="Length of embedding vectors.")] = 256,
    fail_next: Annotated[
        int,
        typer.Option(help="Fail the next N inference requests.", rich_help_panel=_FAULTS),
    ] = 0,
    fail_status: Annotated[
        int,
        typer.Option(help="HTTP status of the failed requests.", rich_help_panel=_FAULTS),
    ] = 503,
    stall_before_headers: Annotated[
        str,
        typer.Option(
            help="Wait this long before every response's headers.", rich_help_panel=_FAULTS
        ),
    ] = "0",
    stall_before_first_token: Annotated[
        str,
        typer.Option(
            help="Wait this long after the headers, before the first token.",
            rich_help_panel=_FAULTS,
        ),
    ] = "0",  # noqa: S107 - a duration, not a secret
    stall_mid_stream: Annotated[
        str,
        typer.Option(
            help="Pause every stream this long after --stall-mid-stream-after tokens.",
            rich_help_panel=_FAULTS,
        ),
    ] = "0",
    stall_mid_stream_after: Annotated[
        int,
        typer.Option(help="Tokens sent before the mid-stream pause.", rich_help_panel=_FAULTS),
    ] = 1,
    close_mid_stream: Annotated[
        int | None,
        typer.Option(
            help="Drop every stream's connection after this many tokens (no [DONE]).",
            rich_help_panel=_FAULTS,
        ),
    ] = None,
    metrics_delay: Annotated[
        str,
        typer.Option(help="Answer /metrics this much later.", rich_help_panel=_FAULTS),
    ] = "0",
) -> None:
    """Run the simulated engine until SIGTERM or Ctrl-C."""
    from fairgate.sim.config import FaultSettings, SimConfig
    from fairgate.sim.server import serve

    if api_key_file is not None:
        if api_key is not None:
            raise typer.BadParameter("give --api-key or --api-key-file, not both")
        try:
            api_key = api_key_file.read_text().strip()
        except OSError as exc:
            raise typer.BadParameter(f"cannot read --api-key-file: {exc.strerror}") from None
    try:
        faults = FaultSettings(
            fail_next=fail_next,
            fail_status=fail_status,
            stall_before_headers=_seconds(stall_before_headers),
            stall_before_first_token=_seconds(stall_before_first_token),
            stall_mid_stream=_seconds(stall_mid_stream),
            stall_mid_stream_after=stall_mid_stream_after,
            close_mid_stream=close_mid_stream,
            metrics_delay=_seconds(metrics_delay),
        )
        config = SimConfig(
            host=host,
            port=port,
            models=tuple(model) if model else ("sim-model",),
            tokens_per_second=speed,
            ttft=_seconds(ttft),
            max_num_seqs=max_num_seqs,
            kv_blocks=kv_blocks,
            block_size=block_size,
            max_model_len=max_model_len,
            max_tokens_default=max_tokens_default,
            eos_after=eos_after,
            scheduling_policy=scheduling_policy,  # type: ignore[arg-type]
            prefix_caching=prefix_caching,
            api_key=api_key,
            personality=personality,  # type: ignore[arg-type]
            record=record,
            seed=seed,
            embedding_dim=embedding_dim,
            faults=faults,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    serve(config)
