"""SimConfig validation: every bad value is a ValueError with the flag's name."""

from __future__ import annotations

from typing import Any

import pytest

from fairgate.sim.config import FaultSettings, SimConfig


def test_defaults_are_valid_and_priority_scheduling() -> None:
    config = SimConfig()
    assert config.scheduling_policy == "priority"
    assert config.context_length == config.kv_blocks * config.block_size
    assert not config.instant and SimConfig(tokens_per_second=0).instant


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"port": 70000}, "port"),
        ({"models": ()}, "model"),
        ({"models": ("a", "a")}, "unique"),
        ({"tokens_per_second": -1}, "tokens-per-second"),
        ({"kv_blocks": 0}, "kv-blocks"),
        ({"max_model_len": 10**9}, "max-model-len"),
        ({"scheduling_policy": "lottery"}, "scheduling-policy"),
        ({"personality": "sglang"}, "personality"),
        ({"api_key": ""}, "api-key"),
        ({"record": -1}, "record"),
    ],
)
def test_bad_values_are_refused(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimConfig(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [{"fail_status": 200}, {"fail_next": -1}, {"stall_mid_stream": -0.5}, {"close_mid_stream": -1}],
)
def test_bad_faults_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        FaultSettings(**overrides)


def test_max_model_len_bounds_the_context() -> None:
    assert SimConfig(kv_blocks=8, block_size=4, max_model_len=20).context_length == 20
