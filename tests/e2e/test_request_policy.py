"""The request policy per engine kind, attacked through a real gateway in front of real engines.

Each denied field is sent plainly, with an escaped key, duplicated and inside
``extra_body``: the gateway answers 400 naming the field, and the simulator's own
record shows the engine never received the request. Caps and size bounds are
exceeded the same way; a per-model override lifts a default and lowers a cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from tests.e2e.conftest import model, write_config
from tests.e2e.raw_client import RawAnswer, raw_request, request_bytes

from fairgate.engines import LLAMA_SERVER_POLICY, VLLM_POLICY
from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess

pytestmark = pytest.mark.slow

JSON = [("Content-Type", "application/json")]


@dataclass(frozen=True, slots=True)
class Env:
    vllm: SimProcess  # models m (vllm), o (openai), m-open (vllm, overridden policy)
    llama: SimProcess  # model l
    gateway: GatewayProcess


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    directory = tmp_path_factory.mktemp("gw")
    with ExitStack() as stack:
        vllm = stack.enter_context(
            SimProcess("--speed", "0", "--model", "m", "--model", "o", "--model", "m-open")
        )
        llama = stack.enter_context(
            SimProcess("--speed", "0", "--model", "l", "--personality", "llama-server")
        )
        open_policy = {"allow": ["chat_template"], "caps": {"top_logprobs": 2}}
        config = write_config(
            directory,
            [
                model("m", vllm),
                model("o", vllm, engine="openai"),
                model("m-open", vllm, request_policy=open_policy),
                model("l", llama, engine="llama-server"),
            ],
        )
        yield Env(vllm, llama, stack.enter_context(GatewayProcess(config)))


@pytest.fixture(autouse=True)
def _fresh(env: Env) -> None:
    env.vllm.reset()
    env.llama.reset()


def post(env: Env, body: bytes, path: str = "/v1/chat/completions") -> RawAnswer:
    return raw_request(env.gateway.url, request_bytes("POST", path, headers=JSON, body=body))


def posted(sim: SimProcess) -> list[dict[str, Any]]:
    """The inference requests the engine received (health checks left out)."""
    return [r for r in sim.requests() if r["method"] == "POST"]


def chat(model_name: str, extra: str) -> bytes:
    return (
        b'{"model":"' + model_name.encode() + b'","max_tokens":2,'
        b'"messages":[{"role":"user","content":"hi"}],' + extra.encode() + b"}"
    )


def escaped(field: str) -> str:
    """The key with its first character written as a \\u escape."""
    return f"\\u{ord(field[0]):04x}{field[1:]}"


SPELLINGS = {
    "plain": '"{f}":1',
    "escaped": '"{e}":1',
    "duplicated": '"{f}":1,"temperature":0.5,"{e}":2',
    "extra_body": '"extra_body":{{"{f}":1}}',
}


def cases(kind: str, fields: frozenset[str]) -> list[tuple[str, str, str]]:
    return [(kind, field, spelling) for field in sorted(fields) for spelling in SPELLINGS]


def assert_refused(answer: RawAnswer, code: str, field: str) -> None:
    assert answer.status == 400, answer.body
    error = orjson.loads(answer.body)["error"]
    assert error["code"] == code
    assert f"'{field}'" in error["message"]


@pytest.mark.parametrize(
    ("model_name", "field", "spelling"),
    cases("m", VLLM_POLICY.deny) + cases("l", LLAMA_SERVER_POLICY.deny),
)
def test_a_denied_field_is_refused_in_any_spelling_and_never_reaches_the_engine(
    env: Env, model_name: str, field: str, spelling: str
) -> None:
    extra = SPELLINGS[spelling].format(f=field, e=escaped(field))
    answer = post(env, chat(model_name, extra))
    assert_refused(answer, "field_not_allowed", field)
    assert posted(env.vllm) == [] and posted(env.llama) == []


@pytest.mark.parametrize("model_name", ["m", "o"])  # vLLM, and a vLLM declared openai
def test_a_background_response_is_refused_and_never_reaches_the_engine(
    env: Env, model_name: str
) -> None:
    # vLLM answers it "queued" at once and generates on after the gateway settled the
    # request: outside admission and fair share, for a result no route of the gateway returns
    body = (
        b'{"model":"' + model_name.encode() + b'","input":"hi","max_output_tokens":2,'
        b'"store":true,"background":true}'
    )
    assert_refused(post(env, body, "/v1/responses"), "field_not_allowed", "background")
    assert posted(env.vllm) == []


def test_the_same_requests_without_the_field_are_served(env: Env) -> None:
    assert post(env, chat("m", '"top_logprobs":20,"logprobs":true')).status == 200
    assert post(env, chat("l", '"n_probs":20,"cache_prompt":true')).status == 200
    assert len(posted(env.vllm)) == 1 and len(posted(env.llama)) == 1


@pytest.mark.parametrize(
    ("model_name", "extra", "field"),
    [
        ("m", '"logprobs":true,"top_logprobs":21', "top_logprobs"),
        ("m", '"top_logprobs":"100"', "top_logprobs"),
        ("o", '"top_logprobs":1000', "top_logprobs"),
        ("l", '"n_probs":1000', "n_probs"),
        ("l", '"n_probs":1,"n_probs":1000', "n_probs"),
        ("m-open", '"top_logprobs":3', "top_logprobs"),
        # vLLM reads -1 as "every token of the vocabulary" and passes its own check
        # when the engine was started with --max-logprobs -1
        ("m", '"logprobs":true,"top_logprobs":-1', "top_logprobs"),
        ("m", '"prompt_logprobs":-1', "prompt_logprobs"),
        ("m", '"logprobs":true,"top_logprobs":"-1"', "top_logprobs"),
    ],
)
def test_a_cap_exceeded_is_refused(env: Env, model_name: str, extra: str, field: str) -> None:
    assert_refused(post(env, chat(model_name, extra)), "field_too_large", field)
    assert posted(env.vllm) == [] and posted(env.llama) == []


def test_llama_servers_own_count_of_completions_is_capped_like_n(env: Env) -> None:
    # llama-server reads n_cmpl before n: "n":1 with "n_cmpl":100 asks for 100 completions
    answer = post(env, chat("l", '"n":1,"n_cmpl":100,"n_predict":2'))
    assert answer.status == 400, answer.body
    error = orjson.loads(answer.body)["error"]
    assert error["code"] == "n_too_large" and "'n_cmpl'" in error["message"]
    assert posted(env.llama) == []


@pytest.mark.parametrize(("model_name", "field"), [("m", "tools"), ("l", "tools")])
def test_a_grammar_larger_than_its_bound_is_refused(env: Env, model_name: str, field: str) -> None:
    properties = {f"p{i}": {"type": "string"} for i in range(3000)}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"properties": properties}}}
    schema = orjson.dumps([tool]).decode()
    assert len(schema) > 64 * 1024
    assert_refused(post(env, chat(model_name, f'"{field}":{schema}')), "field_too_large", field)
    assert posted(env.vllm) == [] and posted(env.llama) == []


def test_a_model_override_lifts_a_default_denial(env: Env) -> None:
    answer = post(env, chat("m-open", '"chat_template":"{{ messages }}"'))
    assert answer.status == 200, answer.body
    (record,) = posted(env.vllm)
    assert orjson.loads(record["body"])["chat_template"] == "{{ messages }}"
    assert_refused(
        post(env, chat("m-open", '"prompt_embeds":"AAAA"')), "field_not_allowed", "prompt_embeds"
    )


def multipart(*fields: tuple[str, str]) -> bytes:
    out = b""
    for name, value in fields:
        out += b'--b\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n'
        out += value.encode() + b"\r\n"
    out += b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
    return out + b"Content-Type: audio/wav\r\n\r\nRIFF\r\n--b--\r\n"


@pytest.mark.parametrize(
    ("fields", "code", "field"),
    [
        ((("model", "l"), ("id_slot", "0")), "field_not_allowed", "id_slot"),
        ((("id_slot", "1"), ("model", "l"), ("id_slot", "2")), "field_not_allowed", "id_slot"),
        (
            (("model", "m"), ("mm_processor_kwargs", "{}")),
            "field_not_allowed",
            "mm_processor_kwargs",
        ),
        ((("model", "m"), ("top_logprobs", "500")), "field_too_large", "top_logprobs"),
    ],
)
def test_a_form_field_is_checked_like_a_json_one(
    env: Env, fields: tuple[tuple[str, str], ...], code: str, field: str
) -> None:
    headers = [("Content-Type", "multipart/form-data; boundary=b")]
    answer = raw_request(
        env.gateway.url,
        request_bytes("POST", "/v1/audio/transcriptions", headers=headers, body=multipart(*fields)),
    )
    assert_refused(answer, code, field)
    assert posted(env.vllm) == [] and posted(env.llama) == []
