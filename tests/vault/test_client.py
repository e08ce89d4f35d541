"""The vault client against a KV v2 server over a real socket: reads, logins, renewal, attacks."""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest

from fairgate.config.secrets import VaultLocation, parse_vault_reference
from fairgate.vault import VaultClient, VaultError
from vault_server import VaultServer

from .conftest import Settings, tls_pair, write_credential

KEY = "sk-engine-key-0123456789"


def at(reference: str) -> VaultLocation:
    return parse_vault_reference(reference)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def read(client: VaultClient, reference: str) -> str:
    try:
        return await client.read(at(reference))
    finally:
        await client.close()


async def test_a_field_of_the_latest_version_is_read(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "engines/vllm", {"key": KEY + "\n", "other": "x"})
    token = vault.token(paths=("secret/engines/",))
    assert await read(VaultClient(settings(token)), "vault:secret/engines/vllm#key") == KEY
    assert ("GET", "/v1/secret/data/engines/vllm", "") in vault.requests


async def test_a_pinned_version_is_read_and_not_the_latest(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "k", {"key": "old"})
    vault.put("secret", "k", {"key": "new"})
    client = VaultClient(settings("root-token"))
    assert await client.read(at("vault:secret/k#key?version=1")) == "old"
    assert await read(client, "vault:secret/k#key") == "new"


@pytest.mark.parametrize(
    ("reference", "reason"),
    [
        ("vault:secret/missing#key", "no such secret or version (404)"),
        ("vault:secret/k#key?version=9", "no such secret or version (404)"),
        ("vault:secret/k#nope", "the secret has no field 'nope'"),
        (
            "vault:nomount/k#key",
            "mount 'nomount' does not exist or this token may not use it (403)",
        ),
    ],
)
async def test_what_cannot_be_read_says_why(
    vault: VaultServer, settings: Settings, reference: str, reason: str
) -> None:
    vault.put("secret", "k", {"key": KEY})
    with pytest.raises(VaultError) as caught:
        await read(VaultClient(settings("root-token")), reference)
    assert str(caught.value) == reason
    assert KEY not in str(caught.value)


async def test_a_deleted_version_is_not_read(vault: VaultServer, settings: Settings) -> None:
    vault.put("secret", "k", {"key": KEY})
    vault.delete_version("secret", "k", 1)
    with pytest.raises(VaultError, match="404"):
        await read(VaultClient(settings("root-token")), "vault:secret/k#key")


async def test_a_token_outside_its_policy_gets_permission_denied(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "other/k", {"key": KEY})
    token = vault.token(paths=("secret/engines/",))
    with pytest.raises(VaultError) as caught:
        await read(VaultClient(settings(token)), "vault:secret/other/k#key")
    assert str(caught.value) == "permission denied (403): permission denied"


async def test_an_unknown_token_is_refused_and_never_echoed(
    vault: VaultServer, settings: Settings
) -> None:
    with pytest.raises(VaultError) as caught:
        await read(VaultClient(settings("s.not-a-real-token")), "vault:secret/k#key")
    assert "403" in str(caught.value) and "s.not-a-real-token" not in str(caught.value)


async def test_a_kv_version_1_mount_is_a_clear_error(
    vault: VaultServer, settings: Settings
) -> None:
    vault.mount("legacy", version=1)
    vault.put("legacy", "k", {"key": KEY})
    with pytest.raises(VaultError) as caught:
        await read(VaultClient(settings("root-token")), "vault:legacy/k#key")
    assert str(caught.value) == (
        "mount 'legacy' is a KV version 1 mount: only KV version 2 is supported"
    )
    assert not any(path.startswith("/v1/legacy/") for _, path, _ in vault.requests)


async def test_the_namespace_header_selects_the_namespaces_mounts(
    vault: VaultServer, settings: Settings
) -> None:
    vault.mount("secret", namespace="team-a")
    vault.put("secret", "k", {"key": "in-team-a"}, namespace="team-a")
    vault.put("secret", "k", {"key": "at-root"})
    token = vault.token(namespace="team-a")
    assert await read(VaultClient(settings(token, namespace="team-a")), "vault:secret/k#key") == (
        "in-team-a"
    )
    assert {ns for _, _, ns in vault.requests} == {"team-a"}
    with pytest.raises(VaultError, match="403"):  # the token is the namespace's only
        await read(VaultClient(settings(token)), "vault:secret/k#key")


async def test_a_redirect_is_not_followed_and_the_token_goes_nowhere_else(
    vault: VaultServer, settings: Settings
) -> None:
    with VaultServer() as elsewhere:
        elsewhere.put("secret", "k", {"key": "attacker's"})
        vault.redirect_to = elsewhere.url
        with pytest.raises(VaultError) as caught:
            await read(VaultClient(settings("root-token")), "vault:secret/k#key")
        assert str(caught.value) == "the vault answered a redirect (302), not followed"
        assert elsewhere.requests == []


async def test_an_oversized_answer_is_refused(vault: VaultServer, settings: Settings) -> None:
    vault.put("secret", "k", {"key": KEY})
    vault.oversize = 2 * 1024 * 1024
    with pytest.raises(VaultError) as caught:
        await read(VaultClient(settings("root-token")), "vault:secret/k#key")
    assert str(caught.value) == f"the vault's answer is larger than {1024 * 1024} bytes"


async def test_an_unreachable_vault_is_an_error_not_a_hang(
    vault: VaultServer, settings: Settings
) -> None:
    config = settings("root-token")
    vault.stop()
    with pytest.raises(VaultError, match="the vault is unreachable"):
        await read(VaultClient(config), "vault:secret/k#key")


async def test_approle_logs_in_with_the_role_and_secret_id_files(
    vault: VaultServer, settings: Settings, tmp_path: Path
) -> None:
    vault.put("secret", "k", {"key": KEY})
    secret_id = vault.approle("gateway-role", paths=("secret/k",))
    config = settings(
        role_id_file=write_credential(tmp_path, "role", "gateway-role"),
        secret_id_file=write_credential(tmp_path, "sid", secret_id),
    )
    assert await read(VaultClient(config), "vault:secret/k#key") == KEY
    assert vault.roles["gateway-role"].logins == 1


async def test_a_wrong_secret_id_is_refused(
    vault: VaultServer, settings: Settings, tmp_path: Path
) -> None:
    vault.approle("gateway-role")
    config = settings(
        role_id_file=write_credential(tmp_path, "role", "gateway-role"),
        secret_id_file=write_credential(tmp_path, "sid", "guessed"),
    )
    with pytest.raises(VaultError) as caught:
        await read(VaultClient(config), "vault:secret/k#key")
    assert str(caught.value) == "the vault answered 400: invalid role or secret ID"
    assert "guessed" not in str(caught.value)


async def test_the_token_is_renewed_once_two_thirds_of_its_ttl_have_passed(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "k", {"key": KEY})
    token = vault.token(ttl=60, renewable=True)
    clock = FakeClock()
    client = VaultClient(settings(token), clock=clock)
    try:
        await client.read(at("vault:secret/k#key"))
        assert client.renew_in() == pytest.approx(40, abs=1)
        clock.now += 30
        await client.keep_token()
        assert vault.tokens[token].renewals == 0
        clock.now += 15
        await client.keep_token()
        assert vault.tokens[token].renewals == 1
        assert client.renew_in() == pytest.approx(40, abs=1)
    finally:
        await client.close()


async def test_a_token_that_cannot_be_renewed_is_replaced_by_logging_in_again(
    vault: VaultServer, settings: Settings, tmp_path: Path
) -> None:
    vault.put("secret", "k", {"key": KEY})
    secret_id = vault.approle("r", token_ttl=60, renewable=False)
    clock = FakeClock()
    config = settings(
        role_id_file=write_credential(tmp_path, "role", "r"),
        secret_id_file=write_credential(tmp_path, "sid", secret_id),
    )
    client = VaultClient(config, clock=clock)
    try:
        await client.read(at("vault:secret/k#key"))
        clock.now += 41
        assert await client.read(at("vault:secret/k#key")) == KEY
        assert vault.roles["r"].logins == 2
        assert vault.count("/v1/auth/token/renew-self") == 0
    finally:
        await client.close()


async def test_tls_is_checked_against_the_ca_file(tmp_path: Path) -> None:
    context, ca_file = tls_pair(tmp_path)
    with VaultServer(ssl_context=context) as server:
        server.put("secret", "k", {"key": KEY})
        (tmp_path / "t").write_text("root-token\n")
        from fairgate.config.vault import VaultSettings

        trusted = VaultSettings(address=server.url, token_file=tmp_path / "t", ca_file=ca_file)
        assert await read(VaultClient(trusted), "vault:secret/k#key") == KEY
        untrusted = VaultSettings(address=server.url, token_file=tmp_path / "t")
        with pytest.raises(VaultError, match="unreachable"):
            await read(VaultClient(untrusted), "vault:secret/k#key")
        assert server.count("/v1/secret/data/k") == 1


def test_the_test_servers_tls_context_is_a_server_context(tmp_path: Path) -> None:
    context, _ = tls_pair(tmp_path)
    assert isinstance(context, ssl.SSLContext)


async def test_a_token_in_its_last_second_is_renewed_at_once_not_taken_as_eternal(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "k", {"key": KEY})
    token = vault.token(ttl=60, renewable=True)
    client = VaultClient(settings(token))
    try:
        # lookup-self reports whole seconds: ttl 0, with an expire_time
        vault.tokens[token].expires = time.time() + 0.95
        await client.keep_token()
        assert client.renew_in() == 0.0
        await client.keep_token()
        assert vault.tokens[token].renewals == 1
        assert client.renew_in() == pytest.approx(40, abs=1)
    finally:
        await client.close()


async def test_a_revoked_token_is_replaced_from_token_file_at_once(
    vault: VaultServer, settings: Settings
) -> None:
    """A 403 from a token the vault no longer knows reads token_file again and retries,
    long before the old token's renewal was due (an agent rotates the file)."""
    vault.put("secret", "k", {"key": KEY})
    old = vault.token(ttl=3600, renewable=True)
    config = settings(old)
    client = VaultClient(config)
    try:
        assert await client.read(at("vault:secret/k#key")) == KEY
        del vault.tokens[old]  # revoked
        new = vault.token(ttl=3600, renewable=True)
        assert config.token_file is not None and config.token_file.path is not None
        config.token_file.path.write_text(new + "\n")
        vault.put("secret", "k", {"key": "sk-rotated-key"})
        assert await client.read(at("vault:secret/k#key")) == "sk-rotated-key"
        assert vault.requests[-1] == ("GET", "/v1/secret/data/k", "")
    finally:
        await client.close()


async def test_a_revoked_approle_token_logs_in_again_at_once(
    vault: VaultServer, settings: Settings, tmp_path: Path
) -> None:
    vault.put("secret", "k", {"key": KEY})
    secret_id = vault.approle("r", token_ttl=3600, renewable=True)
    config = settings(
        role_id_file=write_credential(tmp_path, "role", "r"),
        secret_id_file=write_credential(tmp_path, "sid", secret_id),
    )
    client = VaultClient(config)
    try:
        await client.read(at("vault:secret/k#key"))
        vault.tokens.clear()  # every token revoked
        assert await client.read(at("vault:secret/k#key")) == KEY
        assert vault.roles["r"].logins == 2
    finally:
        await client.close()


async def test_a_token_refused_again_is_reported_and_not_replaced_in_a_loop(
    vault: VaultServer, settings: Settings
) -> None:
    """The file still holds the revoked token: each read asks once and says what happened."""
    vault.put("secret", "k", {"key": KEY})
    old = vault.token()
    client = VaultClient(settings(old))
    try:
        await client.read(at("vault:secret/k#key"))
        del vault.tokens[old]
        before = len(vault.requests)
        for _ in range(3):
            with pytest.raises(VaultError) as caught:
                await client.read(at("vault:secret/k#key"))
            assert "token in vault.token_file is refused by the vault (403" in str(caught.value)
            assert old not in str(caught.value) and "mount" not in str(caught.value)
        assert len(vault.requests) - before <= 3 * 3  # the read, lookup-self, the file's token
    finally:
        await client.close()


async def test_a_valid_token_outside_its_policy_is_not_replaced(
    vault: VaultServer, settings: Settings
) -> None:
    vault.put("secret", "engines/k", {"key": KEY})
    vault.put("secret", "other/k", {"key": KEY})
    token = vault.token(paths=("secret/engines/",))
    client = VaultClient(settings(token))
    try:
        await client.read(at("vault:secret/engines/k#key"))
        logins = vault.count("/v1/auth/token/lookup-self")
        with pytest.raises(VaultError) as caught:
            await client.read(at("vault:secret/other/k#key"))
        assert str(caught.value) == "permission denied (403): permission denied"
        assert vault.count("/v1/auth/token/lookup-self") == logins + 1  # asked, kept
        assert await client.read(at("vault:secret/engines/k#key")) == KEY
    finally:
        await client.close()
