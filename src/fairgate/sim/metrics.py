"""``GET /metrics`` in Prometheus text format, under vLLM's or llama-server's names.

vLLM (v1) labels every series with ``model_name`` (the first served name, as
vLLM does with several names) and ``engine``:

    vllm:num_requests_running{engine="0",model_name="sim-model"} 3.0
    vllm:kv_cache_usage_perc{engine="0",model_name="sim-model"} 0.25   # 0..1

llama-server's ``llamacpp:*`` series carry no labels.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.sim.stats import SimStats

__all__ = ["EngineGauges", "render_llama", "render_vllm"]


@dataclass(frozen=True, slots=True)
class EngineGauges:
    """The engine's state at scrape time; ``kv_usage`` in 0..1, ``kv_tokens`` in use."""

    running: int
    waiting: int
    kv_usage: float
    kv_tokens: int = 0


_VLLM_FAMILIES = (
    ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed."),
    ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed."),
    (
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
    ),
    (
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
    ),
)
_LLAMA_FAMILIES = (
    ("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed."),
    ("llamacpp:prompt_seconds_total", "counter", "Prompt process time"),
    ("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed."),
    ("llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time"),
    ("llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls"),
    (
        "llamacpp:n_busy_slots_per_decode",
        "counter",
        "Average number of busy slots per llama_decode() call",
    ),
    ("llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s."),
    ("llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s."),
    ("llamacpp:requests_processing", "gauge", "Number of requests processing."),
    ("llamacpp:requests_deferred", "gauge", "Number of requests deferred."),
    # Exported by older llama.cpp builds only; kept so KV readings can be tested.
    ("llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage."),
    ("llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens."),
)


def _family(
    out: list[str], name: str, kind: str, help_: str, samples: list[tuple[str, float]]
) -> None:
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        out.append(f"{name}{labels} {float(value)!r}")


def render_vllm(model: str, gauges: EngineGauges, stats: SimStats) -> bytes:
    escaped = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    labels = f'{{engine="0",model_name="{escaped}"}}'
    values = (
        gauges.running,
        gauges.waiting,
        gauges.kv_usage,
        stats.preemptions,
        stats.prompt_tokens,
        stats.generation_tokens,
        stats.prefix_queries,
        stats.prefix_hits,
    )
    out: list[str] = []
    for (name, kind, help_), value in zip(_VLLM_FAMILIES, values, strict=True):
        _family(out, name, kind, help_, [(labels, value)])
    reasons = {"stop": 0, "length": 0, "abort": stats.aborted} | stats.finished_by_reason
    _family(
        out,
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        [
            (f'{{engine="0",finished_reason="{r}",model_name="{escaped}"}}', n)
            for r, n in sorted(reasons.items())
        ],
    )
    return ("\n".join(out) + "\n").encode()


def render_llama(gauges: EngineGauges, stats: SimStats) -> bytes:
    steps = stats.steps
    values = (
        stats.prompt_tokens,
        stats.prefill_seconds,
        stats.generation_tokens,
        stats.decode_seconds,
        steps,
        stats.busy_slots / steps if steps else 0.0,
        stats.prompt_tokens / stats.prefill_seconds if stats.prefill_seconds else 0.0,
        stats.generation_tokens / stats.decode_seconds if stats.decode_seconds else 0.0,
        gauges.running,
        gauges.waiting,
        gauges.kv_usage,
        gauges.kv_tokens,
    )
    out: list[str] = []
    for (name, kind, help_), value in zip(_LLAMA_FAMILIES, values, strict=True):
        _family(out, name, kind, help_, [("", value)])
    return ("\n".join(out) + "\n").encode()
