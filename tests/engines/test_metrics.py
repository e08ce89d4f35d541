"""Engine load read from real-format /metrics pages."""

from __future__ import annotations

import pytest

from fairgate.engines import (
    LLAMA_SERVER_METRICS,
    VLLM_METRICS,
    EngineLoad,
    MetricNames,
    adapter_for,
    parse_engine_metrics,
)

# The shape vLLM (v1 engine, two data-parallel engines) serves on /metrics.
VLLM_PAGE = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12023.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.3-70B-Instruct"} 7.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.3-70B-Instruct"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.3-70B-Instruct"} 2.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.3-70B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.3-70B-Instruct"} 0.8125
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.3-70B-Instruct"} 0.4
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.3-70B-Instruct"} 31.0
vllm:num_preemptions_total{engine="1",model_name="meta-llama/Llama-3.3-70B-Instruct"} 11.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.3-70B-Instruct"} 918273.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 1021.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1021.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 88.25
"""

LLAMA_PAGE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 4096
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
"""


def test_vllm_counts_are_summed_and_kv_is_the_fullest_engine() -> None:
    assert parse_engine_metrics(VLLM_PAGE, VLLM_METRICS) == EngineLoad(
        running=12.0, waiting=2.0, kv_usage=0.8125, preemptions=42.0
    )


def test_llama_server_without_kv_metric_leaves_it_unknown() -> None:
    assert parse_engine_metrics(LLAMA_PAGE, LLAMA_SERVER_METRICS) == EngineLoad(
        running=3.0, waiting=1.0, kv_usage=None
    )


def test_names_are_overridable_for_older_engines() -> None:
    older = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\nvllm:num_requests_running 1\n'
    names = MetricNames(running="vllm:num_requests_running", kv_usage="vllm:gpu_cache_usage_perc")
    assert parse_engine_metrics(older, names) == EngineLoad(running=1.0, kv_usage=0.5)
    assert parse_engine_metrics(older, VLLM_METRICS) == EngineLoad(running=1.0)


def test_absent_nan_and_unconfigured_metrics_are_none() -> None:
    page = 'vllm:num_requests_running{engine="0"} NaN\nvllm:num_requests_waiting 4\n'
    assert parse_engine_metrics(page, VLLM_METRICS) == EngineLoad(waiting=4.0)
    assert parse_engine_metrics(VLLM_PAGE, MetricNames()) == EngineLoad()
    assert parse_engine_metrics("", VLLM_METRICS) == EngineLoad()


def test_a_malformed_unrelated_line_does_not_cost_the_reading() -> None:
    page = VLLM_PAGE + "this is { not prometheus\n"
    assert parse_engine_metrics(page, VLLM_METRICS).running == 12.0


def test_a_malformed_wanted_line_is_an_error() -> None:
    with pytest.raises(ValueError):
        parse_engine_metrics("vllm:num_requests_running{engine=0 x\n", VLLM_METRICS)


def test_similar_names_do_not_match() -> None:
    page = "vllm:num_requests_running_total 9\nvllm:num_requests_runningx 9\n"
    assert parse_engine_metrics(page, VLLM_METRICS) == EngineLoad()


def test_adapter_defaults() -> None:
    assert adapter_for("vllm").metric_names == VLLM_METRICS
    assert adapter_for("llama-server").metric_names == LLAMA_SERVER_METRICS
    assert not adapter_for("openai").metric_names.any()
