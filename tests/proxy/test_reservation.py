"""The reservation of a request and what it is charged when its usage is unknown."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fairgate.config.catalog import Model
from fairgate.core.errors import BadRequest
from fairgate.engines import adapter_for
from fairgate.proxy.endpoints import EndpointTable
from fairgate.proxy.exchange import Exchange, Outcome
from fairgate.proxy.reservation import OutputPolicy, Reservation, charge
from fairgate.proxy.usage import Usage

POLICY = OutputPolicy(
    ceilings={"big": 2000, "small": 100, "llama": 500}, default=300, assumed=256, max_prompts=16
)


def _model(name: str, engine: str, **extra: Any) -> Model:
    entry = {
        "name": name,
        "engine": engine,
        "upstreams": [{"name": "u", "url": "http://127.0.0.1:9"}],
    }
    return Model.model_validate({**entry, **extra})


TABLE = EndpointTable(
    [
        _model("big", "vllm", fallbacks=["llama", "small"]),
        _model("small", "vllm"),
        _model("llama", "llama-server"),
    ],
    {kind: adapter_for(kind) for kind in ("vllm", "llama-server")},
)


def _exchange(body: dict[str, Any], route: str = "/v1/chat/completions") -> Exchange:
    raw = orjson.dumps(body)
    ex = Exchange(request_id="r", method="POST", path=route, started=0.0, endpoint=route)
    ex.body, ex.parsed, ex.prompt_bytes = raw, body, len(raw)
    ex.content_type = b"application/json"
    return ex


def test_the_reservation_is_the_largest_of_the_chain_and_fallbacks_that_cannot_bound_drop() -> None:
    ex = _exchange({"model": "big", "messages": []})
    entry = POLICY.reserve(ex, TABLE.model_for(ex))
    # llama-server cannot be given a cap: without one in the body it never serves this
    assert [c.name for c in entry.chain] == ["big", "small"]
    assert ex.output_caps == {"big": 300, "small": 100}
    assert ex.reservation == Reservation(-(-ex.prompt_bytes // 4), 300)


def test_with_a_cap_the_byte_exact_fallback_stays_and_a_lower_ceiling_drops_a_fallback() -> None:
    # "small" could only honour 100 of the 400 asked for: it never serves this request
    ex = _exchange({"model": "big", "messages": [], "max_tokens": 400, "n": 2})
    entry = POLICY.reserve(ex, TABLE.model_for(ex))
    assert [c.name for c in entry.chain] == ["big", "llama"]
    assert ex.output_caps == {"big": 400, "llama": 400}
    assert ex.reservation is not None and ex.reservation.completion_tokens == 800


def test_the_model_asked_for_refuses_what_it_cannot_bound() -> None:
    ex = _exchange({"model": "llama", "messages": []})
    with pytest.raises(BadRequest, match="needs an output cap"):
        POLICY.reserve(ex, TABLE.model_for(ex))
    ex = _exchange({"model": "small", "messages": [], "max_tokens": 101})
    with pytest.raises(BadRequest, match="at most 100"):
        POLICY.reserve(ex, TABLE.model_for(ex))


def test_a_batch_of_prompts_reserves_every_sequence() -> None:
    ex = _exchange(
        {"model": "big", "prompt": ["a"] * 10, "n": 3, "max_tokens": 50}, "/v1/completions"
    )
    POLICY.reserve(ex, TABLE.model_for(ex))
    assert ex.reservation is not None and ex.reservation.completion_tokens == 1500


def test_an_answer_without_usage_is_charged_the_reservation_flagged() -> None:
    ex = _exchange({"model": "big", "messages": [], "max_tokens": 40})
    POLICY.reserve(ex, TABLE.model_for(ex))
    ex.replica = "r0"
    charge(ex)
    assert ex.usage == Usage(ex.reservation.prompt_tokens, 40, 0, estimated=True)  # type: ignore[union-attr]


def test_a_reported_usage_is_kept_and_earlier_unanswered_attempts_are_added() -> None:
    ex = _exchange({"model": "big", "messages": [], "max_tokens": 40})
    POLICY.reserve(ex, TABLE.model_for(ex))
    ex.replica, ex.usage, ex.unanswered = "r1", Usage(10, 5), ("big",)
    charge(ex)
    prompt = ex.reservation.prompt_tokens  # type: ignore[union-attr]
    assert ex.usage == Usage(10 + prompt, 5 + 40, 0, estimated=True)


def test_nothing_is_charged_when_no_engine_was_reached() -> None:
    ex = _exchange({"model": "big", "messages": []})
    POLICY.reserve(ex, TABLE.model_for(ex))
    charge(ex)
    assert ex.usage is None


@pytest.mark.parametrize(
    ("status", "stream"), [(404, False), (422, False), (429, False), (400, True)]
)
def test_an_engine_s_own_refusal_before_generating_is_charged_nothing(
    status: int, stream: bool
) -> None:
    ex = _exchange({"model": "big", "messages": [], "max_tokens": 40, "stream": stream})
    POLICY.reserve(ex, TABLE.model_for(ex))
    ex.replica, ex.status, ex.stream = "r0", status, stream  # the engine's answer, relayed
    charge(ex)
    assert ex.usage == Usage(0, 0, 0, estimated=False)


def test_a_plain_400_keeps_the_reservation_since_vllm_sends_it_after_generating_too() -> None:
    """vLLM answers 400 to a ValueError raised after the generation (a required tool call
    cut off by max_tokens that fails to parse): free tokens, were a 400 charged nothing."""
    ex = _exchange({"model": "big", "messages": [], "max_tokens": 40})
    POLICY.reserve(ex, TABLE.model_for(ex))
    ex.replica, ex.status = "r0", 400
    charge(ex)
    assert ex.usage == ex.reservation.usage()  # type: ignore[union-attr]


def test_an_engine_s_failure_and_a_refusal_after_unanswered_attempts_keep_their_charges() -> None:
    failed = _exchange({"model": "big", "messages": [], "max_tokens": 40})
    POLICY.reserve(failed, TABLE.model_for(failed))
    failed.replica, failed.status = "r0", 500  # the engine may have worked before failing
    charge(failed)
    assert failed.usage == failed.reservation.usage()  # type: ignore[union-attr]

    # the gateway's own 4xx after an attempt that got no answer: that attempt is charged
    refused = _exchange({"model": "big", "messages": [], "max_tokens": 40})
    POLICY.reserve(refused, TABLE.model_for(refused))
    refused.replica, refused.status, refused.unanswered = "r0", 429, ("big",)
    refused.outcome = Outcome.UPSTREAM_ERROR
    charge(refused)
    assert refused.usage is not None and refused.usage.completion_tokens >= 40
