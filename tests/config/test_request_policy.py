"""``models[].request_policy``: read as written, bad names and values refused at their line."""

from __future__ import annotations

from .conftest import Load, Problems
from .test_catalog import one_model


def test_a_request_policy_is_read_as_written(load: Load) -> None:
    cfg = load(
        one_model(
            request_policy="{deny: [logit_bias], allow: [chat_template], caps: {n: 2},"
            " max_bytes: {tools: 4096}}"
        )
    )
    policy = cfg.models[0].request_policy
    assert (policy.deny, policy.allow) == (("logit_bias",), ("chat_template",))
    assert (policy.caps, policy.max_bytes) == ({"n": 2}, {"tools": 4096})


def test_no_request_policy_changes_nothing(load: Load) -> None:
    policy = load(one_model()).models[0].request_policy
    assert (policy.deny, policy.allow, policy.caps, policy.max_bytes) == ((), (), {}, {})


def test_a_field_both_denied_and_allowed_is_refused(problems: Problems) -> None:
    [found] = problems(one_model(request_policy="{deny: [n_probs], allow: [n_probs]}"))
    assert found.startswith("3:")
    assert "denied and allowed at once: n_probs" in found


def test_bad_names_and_values_are_refused_where_they_are(problems: Problems) -> None:
    found = problems(
        one_model(request_policy='{deny: ["bad name"], caps: {n: -1}, max_bytes: {tools: 0}}')
    )
    assert len(found) == 3
    assert all(line.startswith("3:") for line in found)
    assert any("not a request field name" in line for line in found)
