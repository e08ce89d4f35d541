"""The request policy per engine kind: denied fields, numeric caps, size bounds, overrides."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairgate.engines import (
    LLAMA_SERVER_POLICY,
    OPENAI_POLICY,
    STRIPPED_FIELDS,
    VLLM_POLICY,
    FieldRefused,
    RequestPolicy,
    parse_form,
    policy_for,
)

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
KINDS = {"vllm": VLLM_POLICY, "llama-server": LLAMA_SERVER_POLICY, "openai": OPENAI_POLICY}


def refusal(policy: RequestPolicy, body: dict[str, Any]) -> FieldRefused:
    with pytest.raises(FieldRefused) as caught:
        policy.check(body)
    return caught.value


def test_the_defaults_deny_what_the_issue_names() -> None:
    assert {
        "chat_template",
        "chat_template_kwargs",
        "prompt_embeds",
        "mm_processor_kwargs",
    } <= VLLM_POLICY.deny
    assert {"id_slot", "lora", "samplers", "t_max_predict_ms"} <= LLAMA_SERVER_POLICY.deny
    assert policy_for("vllm") is VLLM_POLICY
    with pytest.raises(ValueError, match="unknown engine kind"):
        policy_for("tgi")


@pytest.mark.parametrize(
    ("kind", "field"),
    [("vllm", name) for name in sorted(VLLM_POLICY.deny)]
    + [("llama-server", name) for name in sorted(LLAMA_SERVER_POLICY.deny)],
)
def test_each_denied_field_is_refused_naming_it(kind: str, field: str) -> None:
    error = refusal(KINDS[kind], {**CHAT, field: 0})
    assert error.status == 400
    assert error.code == "field_not_allowed"
    assert error.field == field
    assert f"'{field}'" in error.message
    body = orjson.loads(error.body())
    assert body["error"]["code"] == "field_not_allowed"


def test_a_benign_body_passes_every_kind() -> None:
    body = {**CHAT, "temperature": 0.2, "n": 2, "logprobs": True, "top_logprobs": 5}
    for policy in KINDS.values():
        policy.check(body)


def test_a_denied_field_inside_extra_body_is_refused() -> None:
    error = refusal(VLLM_POLICY, {**CHAT, "extra_body": {"chat_template": "{{ x }}"}})
    assert error.field == "chat_template"
    error = refusal(LLAMA_SERVER_POLICY, {**CHAT, "extra_body": {"id_slot": 0}})
    assert error.field == "id_slot"


@pytest.mark.parametrize("value", [21, 21.5, "21", " 1e3 ", float("inf"), "nan"])
def test_a_cap_refuses_larger_numbers_however_written(value: Any) -> None:
    error = refusal(VLLM_POLICY, {**CHAT, "top_logprobs": value})
    assert error.code == "field_too_large"
    assert error.message == "'top_logprobs' must be at most 20"


@pytest.mark.parametrize("value", [20, 0, True, "20", "many", [100], None])
def test_a_cap_lets_smaller_values_and_non_numbers_through(value: Any) -> None:
    VLLM_POLICY.check({**CHAT, "top_logprobs": value})  # non-numbers: the engine refuses them


@pytest.mark.parametrize("field", ["top_logprobs", "prompt_logprobs", "logprobs"])
@pytest.mark.parametrize("value", [-1, -1.0, "-1", -2, float("-inf")])
def test_a_cap_refuses_negative_counts_which_vllm_reads_as_the_whole_vocabulary(
    field: str, value: Any
) -> None:
    error = refusal(VLLM_POLICY, {**CHAT, field: value})
    assert error.code == "field_too_large" and error.field == field
    assert error.message == f"'{field}' must be between 0 and 20"


def test_llama_n_probs_is_capped() -> None:
    assert refusal(LLAMA_SERVER_POLICY, {"prompt": "x", "n_probs": 1000}).field == "n_probs"
    LLAMA_SERVER_POLICY.check({"prompt": "x", "n_probs": 20})


def test_a_structured_field_is_bounded_by_its_size() -> None:
    policy = VLLM_POLICY.merged(max_bytes={"tools": 100})
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    policy.check({**CHAT, "tools": [tool]})
    error = refusal(policy, {**CHAT, "tools": [tool] * 10})
    assert (error.code, error.field) == ("field_too_large", "tools")
    assert error.message == "'tools' is larger than 100 bytes"


def test_a_string_grammar_is_measured_in_utf8_bytes() -> None:
    policy = LLAMA_SERVER_POLICY.merged(max_bytes={"grammar": 10})
    policy.check({"prompt": "x", "grammar": "é" * 5})  # 10 bytes
    assert refusal(policy, {"prompt": "x", "grammar": "é" * 6}).field == "grammar"


def test_the_default_bounds_are_64_kib() -> None:
    assert VLLM_POLICY.max_bytes["guided_json"] == 64 * 1024
    assert LLAMA_SERVER_POLICY.max_bytes["json_schema"] == 64 * 1024
    VLLM_POLICY.check({**CHAT, "guided_regex": "a" * (64 * 1024)})
    assert refusal(VLLM_POLICY, {**CHAT, "guided_regex": "a" * (64 * 1024 + 1)})


def test_an_override_extends_denials_lifts_defaults_and_replaces_caps() -> None:
    policy = VLLM_POLICY.merged(
        deny=("logit_bias",), allow=("chat_template", "top_logprobs"), caps={"n": 2}
    )
    assert refusal(policy, {**CHAT, "logit_bias": {}}).field == "logit_bias"
    assert refusal(policy, {**CHAT, "prompt_embeds": "x"}).field == "prompt_embeds"
    policy.check({**CHAT, "chat_template": "{{ messages }}", "top_logprobs": 100})
    assert refusal(policy, {**CHAT, "n": 3}).message == "'n' must be at most 2"
    assert VLLM_POLICY.deny >= {"chat_template"}  # the default itself is unchanged


def _form(*fields: tuple[str, str]) -> bytes:
    out = b""
    for name, value in fields:
        out += b'--b\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n'
        out += value.encode() + b"\r\n"
    return out + b"--b--\r\n"


def test_form_fields_are_checked_every_occurrence() -> None:
    form = parse_form(b"multipart/form-data; boundary=b", _form(("model", "m"), ("n_probs", "5")))
    assert form is not None
    LLAMA_SERVER_POLICY.check_form(form)
    for fields in (
        (("model", "m"), ("id_slot", "1")),
        (("id_slot", "1"), ("model", "m"), ("id_slot", "2")),
    ):
        form = parse_form(b"multipart/form-data; boundary=b", _form(*fields))
        assert form is not None
        with pytest.raises(FieldRefused, match="'id_slot'"):
            LLAMA_SERVER_POLICY.check_form(form)
    form = parse_form(b"multipart/form-data; boundary=b", _form(("n_probs", "500")))
    assert form is not None
    with pytest.raises(FieldRefused, match="'n_probs' must be at most 20"):
        LLAMA_SERVER_POLICY.check_form(form)


# -- any spelling ------------------------------------------------------------------------


def _escaped(key: str, mask: list[bool]) -> str:
    """``key`` as a JSON string literal with the characters ``mask`` picks written as \\uXXXX."""
    out = "".join(
        f"\\u{ord(ch):04x}" if escape else ch for ch, escape in zip(key, mask, strict=False)
    )
    return '"' + out + key[len(mask) :] + '"'


@st.composite
def hostile_bodies(draw: st.DrawFn, deny: frozenset[str]) -> tuple[bytes, str]:
    """A raw JSON body carrying one denied field under some spelling, and the field."""
    field = draw(st.sampled_from(sorted(deny)))
    mask = draw(st.lists(st.booleans(), max_size=len(field)))
    key = _escaped(field, mask)
    value = draw(st.sampled_from(['"{{ x }}"', "1", "null", "[]", "{}", "false"]))
    benign = draw(
        st.lists(
            st.sampled_from(['"temperature":0.1', '"stream":false', '"n":1', '"max_tokens":3']),
            max_size=3,
        )
    )
    entry = f"{key}:{value}"
    where = draw(st.sampled_from(["top", "first-of-two", "last-of-two", "extra_body"]))
    if where == "first-of-two":
        members = [entry, *benign, f"{key}:null" if value != "null" else f"{key}:1"]
    elif where == "last-of-two":
        members = [f'"{field}":1', *benign, entry]
    elif where == "extra_body":
        members = [*benign, '"extra_body":{' + entry + "}"]
    else:
        members = [*benign, entry]
    order = draw(st.permutations(['"model":"m"', '"prompt":"x"']))
    return ("{" + ",".join([*order, *members]) + "}").encode(), field


def _every_key(raw: bytes) -> set[str]:
    """Every key of the object and of its ``extra_body``, duplicates included (what any
    parser could take, whichever of the duplicates it keeps)."""
    keys: set[str] = set()

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys.update(name for name, _ in pairs)
        return dict(pairs)

    json.loads(raw, object_pairs_hook=hook)
    return keys


@pytest.mark.parametrize("kind", ["vllm", "llama-server"])
@pytest.mark.fuzz
@given(data=st.data())
def test_no_denied_field_survives_any_spelling(kind: str, data: st.DataObject) -> None:
    policy = KINDS[kind]
    raw, field = data.draw(hostile_bodies(policy.deny))
    assert field in _every_key(raw)  # the engine could see it: the gateway must refuse
    parsed = orjson.loads(raw)  # as the proxy parses it, once
    with pytest.raises(FieldRefused) as caught:
        policy.check(parsed)
    assert caught.value.field in policy.deny


@pytest.mark.fuzz
@given(
    key=st.sampled_from(sorted(VLLM_POLICY.deny)),
    upper=st.lists(st.booleans(), min_size=1, max_size=8).filter(any),
)
def test_another_case_is_another_field_the_engines_ignore(key: str, upper: list[bool]) -> None:
    spelled = (
        "".join(ch.upper() if flip else ch for ch, flip in zip(key, upper, strict=False))
        + key[len(upper) :]
    )
    if spelled == key:
        return
    VLLM_POLICY.check({**CHAT, spelled: 1})  # vLLM's pydantic field names are exact


# -- the vLLM rewrite --------------------------------------------------------------
# What the engine receives is the property of tests/engines/test_vllm_properties.py;
# here only that the policy leaves the steering fields to the rewrite.


@pytest.mark.parametrize("field", sorted(STRIPPED_FIELDS))
def test_steering_fields_are_removed_by_the_rewrite_not_refused(field: str) -> None:
    VLLM_POLICY.check({**CHAT, field: 1})
