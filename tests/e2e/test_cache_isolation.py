"""Tenant prefix-cache isolation: the gateway's cache_salt, read back from a simulated vLLM.

The simulator shares cached KV blocks only between requests with the same
``cache_salt`` (docs/sim.md), as vLLM does; ``cached_tokens`` in the usage tells
whether a prompt hit blocks another request left behind.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

import httpx
import orjson
from tests.e2e.conftest import AUTH, StartGateway, StartSim, add_key, model

SALT_KEY = b"a-test-hmac-key-of-32-bytes-long"
PROMPT = "The same long system prompt, shared word for word by every tenant. " * 8
ORGS = [
    {"name": "test-org", "share": 0.5, "teams": ["t"]},
    {"name": "other-org", "share": 0.5, "teams": ["u"]},
]


def ask(url: str, headers: dict[str, str], **extra: object) -> dict[str, object]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 2,
        **extra,
    }
    answer = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def cached(answer: dict[str, object]) -> int:
    usage = answer["usage"]
    assert isinstance(usage, dict)
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def test_tenants_never_share_cached_prefixes_and_a_client_salt_is_replaced(
    start_sim: StartSim, start_gateway: StartGateway, tmp_path: Path
) -> None:
    key_file = tmp_path / "salt-key"
    key_file.write_bytes(SALT_KEY)
    sim = start_sim("--model", "m", "--speed", "2000", "--ttft", "0", "--block-size", "16")
    gw = start_gateway(
        [model("m", sim)], orgs=ORGS, cache_isolation={"scope": "org", "key_file": str(key_file)}
    )
    other = {"authorization": "Bearer " + add_key(gw.config, "u")}

    first = ask(gw.url, AUTH, cache_salt="chosen-by-the-client")
    assert cached(first) == 0
    assert cached(ask(gw.url, AUTH)) > 0, "the same tenant reuses its own prefix"
    assert cached(ask(gw.url, other)) == 0, "another tenant must not hit those blocks"

    expected = base64.urlsafe_b64encode(
        hmac.new(SALT_KEY, b"org:test-org", hashlib.sha256).digest()
    ).rstrip(b"=")
    bodies = [orjson.loads(r["body"]) for r in sim.requests(path="/v1/chat/completions")]
    assert bodies[0]["cache_salt"] == expected.decode()
    assert bodies[1]["cache_salt"] == expected.decode()
    assert bodies[2]["cache_salt"] not in (expected.decode(), "chosen-by-the-client")


def test_scope_none_sends_no_salt_so_tenants_share(
    start_sim: StartSim, start_gateway: StartGateway
) -> None:
    sim = start_sim("--model", "m", "--speed", "2000", "--ttft", "0", "--block-size", "16")
    gw = start_gateway([model("m", sim)], orgs=ORGS, cache_isolation={"scope": "none"})
    other = {"authorization": "Bearer " + add_key(gw.config, "u")}
    ask(gw.url, AUTH, cache_salt="chosen-by-the-client")
    assert cached(ask(gw.url, other)) > 0
    bodies = [orjson.loads(r["body"]) for r in sim.requests(path="/v1/chat/completions")]
    assert all("cache_salt" not in b for b in bodies)
