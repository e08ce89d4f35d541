"""The Prometheus text of both personalities."""

from __future__ import annotations

from fairgate.sim.metrics import EngineGauges, render_llama, render_vllm
from fairgate.sim.stats import Preemption, SimStats


def _samples(text: bytes) -> dict[str, float]:
    lines = [line for line in text.decode().splitlines() if not line.startswith("#")]
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines}


def test_vllm_names_and_labels() -> None:
    stats = SimStats(prompt_tokens=12, generation_tokens=30, prefix_queries=40, prefix_hits=16)
    stats.preempted(Preemption("r", 10, 1))
    stats.finish("length")
    samples = _samples(render_vllm("m", EngineGauges(running=2, waiting=1, kv_usage=0.25), stats))
    label = '{engine="0",model_name="m"}'
    assert samples[f"vllm:num_requests_running{label}"] == 2
    assert samples[f"vllm:num_requests_waiting{label}"] == 1
    assert samples[f"vllm:kv_cache_usage_perc{label}"] == 0.25
    assert samples[f"vllm:num_preemptions_total{label}"] == 1
    assert samples[f"vllm:prompt_tokens_total{label}"] == 12
    assert samples[f"vllm:generation_tokens_total{label}"] == 30
    assert samples[f"vllm:prefix_cache_queries_total{label}"] == 40
    assert samples[f"vllm:prefix_cache_hits_total{label}"] == 16
    length = 'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"}'
    assert samples[length] == 1


def test_every_family_is_typed() -> None:
    text = render_vllm("m", EngineGauges(0, 0, 0.0), SimStats()).decode()
    families = {line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE")}
    names = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    assert names == families


def test_model_names_are_escaped() -> None:
    text = render_vllm('a"b', EngineGauges(0, 0, 0.0), SimStats()).decode()
    assert 'model_name="a\\"b"' in text


def test_llama_rates_and_gauges() -> None:
    stats = SimStats(
        prompt_tokens=100, generation_tokens=50, prefill_seconds=2.0, decode_seconds=5.0
    )
    stats.steps, stats.busy_slots = 10, 25
    samples = _samples(render_llama(EngineGauges(running=3, waiting=4, kv_usage=0.5), stats))
    assert samples["llamacpp:requests_processing"] == 3
    assert samples["llamacpp:requests_deferred"] == 4
    assert samples["llamacpp:prompt_tokens_seconds"] == 50
    assert samples["llamacpp:predicted_tokens_seconds"] == 10
    assert samples["llamacpp:n_busy_slots_per_decode"] == 2.5
    assert samples["llamacpp:n_decode_total"] == 10
