"""Upstream keys held in a vault: rotated without a restart, kept through an outage.

A real gateway process reads its upstream key from a KV v2 server the test
runs (tests/vault_server.py, over a real socket), in front of a simulator that
requires that key. The key is rotated in the vault and in the simulator (a new
simulator on the same port, requiring only the new key); the next requests
after ``cache_ttl`` succeed with it. The vault is then stopped: requests keep
working with the last key, the metrics and the log say so. The vault token has
a TTL shorter than the test, so the gateway reads past it only by renewing it.
A gateway whose secret the vault refuses does not start, and says which one.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.e2e.conftest import TEST_KEY, StartSim, model, write_config
from tests.e2e.robust_wire import stderr_into

from fairgate.server.process import GatewayProcess
from fairgate.sim.process import SimProcess
from vault_server import VaultServer

pytestmark = pytest.mark.slow

REFERENCE = "vault:secret/engines/vllm#key"
KEYS = ("sk-engine-first-1111", "sk-engine-second-2222", "sk-engine-third-3333")
TOKEN_TTL = 10.0


@pytest.fixture
def vault() -> Iterator[VaultServer]:
    server = VaultServer().start()
    yield server
    server.stop()


def vault_section(vault: VaultServer, directory: Path, token: str, **extra: Any) -> dict[str, Any]:
    (directory / "vault.token").write_text(token + "\n")
    return {
        "address": vault.url,
        "token_file": str(directory / "vault.token"),
        "cache_ttl": "1s",
        "timeout": "1s",
        **extra,
    }


def keyed_model(sim: SimProcess) -> dict[str, Any]:
    return model("m", sim, upstreams=[{"name": "r0", "url": sim.url, "key_file": REFERENCE}])


def ask(gateway: GatewayProcess) -> str:
    with openai.OpenAI(base_url=gateway.url + "/v1", api_key=TEST_KEY, max_retries=0) as client:
        answer = client.completions.create(model="m", prompt="hello", max_tokens=2)
    return answer.choices[0].text


def served_within(gateway: GatewayProcess, seconds: float) -> float:
    """Seconds until a request succeeds (AssertionError past ``seconds``)."""
    start = time.monotonic()
    while True:
        try:
            ask(gateway)
            return time.monotonic() - start
        except openai.APIStatusError:
            if time.monotonic() - start > seconds:
                raise
            time.sleep(0.2)


def rotate(vault: VaultServer, sim: SimProcess, key: str) -> SimProcess:
    """``key`` written to the vault; a simulator requiring only it replaces ``sim``."""
    vault.put("secret", "engines/vllm", {"key": key})
    port = sim.port
    sim.stop()
    return SimProcess("--model", "m", "--speed", "0", "--api-key", key, "--port", str(port)).start()


def metrics(gateway: GatewayProcess) -> str:
    with urllib.request.urlopen(gateway.admin_url + "/metrics", timeout=5) as response:
        text: str = response.read().decode()
        return text


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the metrics")


def test_a_key_rotated_in_the_vault_is_used_without_a_restart_and_survives_an_outage(
    vault: VaultServer, start_sim: StartSim, tmp_path: Path
) -> None:
    vault.put("secret", "engines/vllm", {"key": KEYS[0]})
    sim = start_sim("--model", "m", "--speed", "0", "--api-key", KEYS[0])
    config = write_config(
        tmp_path, [keyed_model(sim)], vault=vault_section(vault, tmp_path, "none-yet")
    )
    # The token's TTL runs from here: shorter than the test, so only renewal keeps it.
    token = vault.token(paths=("secret/engines/",), ttl=TOKEN_TTL, renewable=True)
    (tmp_path / "vault.token").write_text(token + "\n")
    issued = time.monotonic()
    log = tmp_path / "gateway.log"
    with stderr_into(log):
        gateway = GatewayProcess(config).start()
    sims = [sim]
    try:
        assert ask(gateway)

        # Rotation: the old key is refused by the new simulator, the new one is read in time.
        sims.append(rotate(vault, sims[-1], KEYS[1]))
        waited = served_within(gateway, seconds=10)
        print(f"\nfirst rotation served after {waited:.1f}s (cache_ttl 1s)")
        sent = [dict(r["headers"]).get("authorization") for r in sims[-1].requests()]
        print("keys the new simulator was sent:", [key and key[-4:] for key in sent])
        assert sent[-1] == f"Bearer {KEYS[1]}"
        assert set(sent) <= {f"Bearer {KEYS[0]}", f"Bearer {KEYS[1]}"}

        # Past the token's original TTL the gateway still reads: it renewed the token.
        time.sleep(max(0.0, issued + TOKEN_TTL + 1.0 - time.monotonic()))
        sims.append(rotate(vault, sims[-1], KEYS[2]))
        waited = served_within(gateway, seconds=10)
        print(f"second rotation, past the token's first TTL, served after {waited:.1f}s")
        assert vault.tokens[token].renewals >= 1
        assert sample(metrics(gateway), "fairgate_vault_available") == 1.0

        # Outage: the last key keeps working; the metric and the log say so.
        vault.stop()
        time.sleep(2.5)
        for _ in range(3):
            assert ask(gateway)
        text = metrics(gateway)
        assert sample(text, "fairgate_vault_available") == 0.0
        failures = f'fairgate_secret_refresh_failures_total{{reference="{REFERENCE}"}}'
        assert sample(text, failures) >= 1.0
    finally:
        gateway.stop()
        for started in sims[1:]:
            started.stop()
    written = log.read_text()
    assert f"vault secret {REFERENCE} could not be read again" in written
    assert not any(key in written for key in KEYS)
    assert token not in written


def test_a_gateway_whose_secret_the_vault_refuses_does_not_start_and_names_it(
    vault: VaultServer, tmp_path: Path
) -> None:
    vault.put("secret", "engines/vllm", {"key": KEYS[0]})
    token = vault.token(paths=("secret/other/",))
    with SimProcess("--speed", "0") as sim:
        config = write_config(
            tmp_path, [keyed_model(sim)], vault=vault_section(vault, tmp_path, token)
        )
        run = subprocess.run(
            [sys.executable, "-m", "fairgate", "serve", "-c", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert run.returncode == 1
    assert f"{REFERENCE}: cannot be read: permission denied (403)" in run.stderr
    assert token not in run.stderr + run.stdout
    assert "listening" not in run.stdout
    assert vault.count("/v1/secret/data/engines/vllm") == 1


def test_approle_logs_in_again_when_its_token_cannot_be_renewed(
    vault: VaultServer, start_sim: StartSim, tmp_path: Path
) -> None:
    vault.put("secret", "engines/vllm", {"key": KEYS[0]})
    secret_id = vault.approle("gateway", paths=("secret/engines/",), token_ttl=3, renewable=False)
    (tmp_path / "role-id").write_text("gateway\n")
    (tmp_path / "secret-id").write_text(secret_id + "\n")
    approle = {
        "address": vault.url,
        "role_id_file": str(tmp_path / "role-id"),
        "secret_id_file": str(tmp_path / "secret-id"),
        "cache_ttl": "1s",
        "timeout": "1s",
    }
    sims = [start_sim("--model", "m", "--speed", "0", "--api-key", KEYS[0])]
    config = write_config(tmp_path, [keyed_model(sims[0])], vault=approle)
    with GatewayProcess(config) as gateway:
        try:
            assert ask(gateway)
            logins = vault.roles["gateway"].logins
            time.sleep(4.0)  # past the first token's TTL: only a new login reads now
            sims.append(rotate(vault, sims[-1], KEYS[1]))
            served_within(gateway, seconds=10)
            assert vault.roles["gateway"].logins > logins
            assert vault.count("/v1/auth/token/renew-self") == 0
        finally:
            for started in sims[1:]:
                started.stop()


def test_a_revoked_token_is_replaced_from_token_file_and_a_rotated_master_key_takes_effect(
    vault: VaultServer, start_sim: StartSim, tmp_path: Path
) -> None:
    """The token is revoked long before its renewal is due and the file rotated to a new
    one (what Vault Agent does): the next refresh reads the file again, so the master key
    rotated meanwhile takes effect within cache_ttl."""
    masters = ("master-key-version-one-0123456789", "master-key-version-two-0123456789")
    vault.put("secret", "fairgate", {"master": masters[0]})
    old = vault.token(ttl=3600, renewable=True)  # renewal due only after 40 minutes
    sim = start_sim("--model", "m", "--speed", "0")
    config = write_config(
        tmp_path,
        [model("m", sim)],
        master_key_file="vault:secret/fairgate#master",
        vault=vault_section(vault, tmp_path, old),
    )

    def whoami(gateway: GatewayProcess, key: str) -> int:
        request = urllib.request.Request(
            gateway.admin_url + "/admin/whoami", headers={"Authorization": f"Bearer {key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as refused:
            return refused.code

    log = tmp_path / "gateway.log"
    with stderr_into(log), GatewayProcess(config) as gateway:
        assert whoami(gateway, masters[0]) == 200
        del vault.tokens[old]  # revoked
        new = vault.token(ttl=3600, renewable=True)
        (tmp_path / "vault.token").write_text(new + "\n")
        vault.put("secret", "fairgate", {"master": masters[1]})
        deadline = time.monotonic() + 6.0  # cache_ttl is 1 s
        while whoami(gateway, masters[1]) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert whoami(gateway, masters[1]) == 200
        assert whoami(gateway, masters[0]) == 401
        time.sleep(1.5)
        assert sample(metrics(gateway), "fairgate_vault_available") == 1.0
    written = log.read_text()
    assert old not in written and new not in written
    assert not any(master in written for master in masters)
