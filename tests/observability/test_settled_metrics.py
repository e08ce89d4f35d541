"""A settled request's children, looked up together, expose what looking each up did."""

from __future__ import annotations

import re

from prometheus_client import generate_latest

from fairgate.observability.metrics import GatewayMetrics

_CREATED = re.compile(rb"^(\w+_created(?:\{[^}]*\})?) \S+$", re.M)

# (model, route, status, seconds to the first byte or None, prompt, completion, cached,
# estimated): a refused request writes no first-token time and no tokens
SETTLED = (
    ("m", "/v1/chat/completions", "200", 0.02, 100, 20, 0, False),
    ("m", "/v1/chat/completions", "401", None, 0, 0, 0, False),
    ("m", "/v1/completions", "200", 0.03, 50, 0, 10, True),
    ("other", "/v1/chat/completions", "200", None, 7, 3, 0, False),
    ("m", "/v1/chat/completions", "200", 0.04, 1, 2, 3, True),
)


def _exposition(metrics: GatewayMetrics) -> bytes:
    # every _created line holds the time its child was made: the same lines, other times
    return _CREATED.sub(rb"\1 T", generate_latest(metrics.registry))


def _one_by_one(m: GatewayMetrics) -> None:
    for model, route, status, first, prompt, completion, cached, estimated in SETTLED:
        m.child(m.requests, model, route, status).inc()
        m.child(m.duration, model, route).observe(0.1)
        if first is not None:
            m.child(m.ttft, model).observe(first)
        if prompt:
            m.child(m.tokens, model, "prompt").inc(prompt)
        if completion:
            m.child(m.tokens, model, "completion").inc(completion)
        if cached:
            m.child(m.tokens, model, "cached").inc(cached)
        if estimated:
            m.child(m.usage_estimated, model).inc()


def _together(m: GatewayMetrics) -> None:
    for model, route, status, first, prompt, completion, cached, estimated in SETTLED:
        settled = m.settled(model, route, status)
        settled.requests.inc()
        settled.duration.observe(0.1)
        if first is not None:
            settled.ttft.observe(first)
        if prompt:
            settled.prompt_tokens.inc(prompt)
        if completion:
            settled.completion_tokens.inc(completion)
        if cached:
            settled.cached_tokens.inc(cached)
        if estimated:
            settled.estimated.inc()


def test_the_exposition_is_the_one_the_children_looked_up_one_by_one_made() -> None:
    apart, together = GatewayMetrics(), GatewayMetrics()
    _one_by_one(apart)
    _together(together)
    ours = _exposition(together)
    assert ours == _exposition(apart)
    assert b'fairgate_tokens_total{kind="cached",model="m"} 13.0' in ours


def test_a_child_never_written_is_not_exposed() -> None:
    metrics = GatewayMetrics()
    settled = metrics.settled("m", "/v1/chat/completions", "401")
    settled.requests.inc()
    settled.duration.observe(0.1)
    text = _exposition(metrics)
    assert b'fairgate_requests_total{model="m",route="/v1/chat/completions",status="401"}' in text
    assert b"fairgate_ttft_seconds_count{" not in text
    assert b"fairgate_tokens_total{" not in text
    assert b"fairgate_usage_estimated_total{" not in text


def test_one_label_set_is_looked_up_once_and_shares_the_childrens_cache() -> None:
    metrics = GatewayMetrics()
    settled = metrics.settled("m", "/r", "200")
    assert metrics.settled("m", "/r", "200") is settled
    settled.ttft.observe(0.5)
    # made on its first write, then the very child every other caller gets
    assert settled.ttft is metrics.child(metrics.ttft, "m")
    assert metrics.settled("m", "/r", "500").ttft is not settled.ttft  # not made yet there
    metrics.settled("m", "/r", "500").ttft.observe(1.0)
    assert metrics.settled("m", "/r", "500").ttft is settled.ttft
    assert metrics.registry.get_sample_value("fairgate_ttft_seconds_count", {"model": "m"}) == 2
