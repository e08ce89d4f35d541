"""Secrets by reference: files checked at load time, content never printed."""

from __future__ import annotations

import string
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from fairgate.config import ConfigError, SecretRef
from fairgate.config.secrets import (
    MAX_SECRET_BYTES,
    BadReference,
    VaultLocation,
    parse_vault_reference,
)

from .conftest import MINIMAL, Load, Problems, with_minimal

SECRET = "sk-live-do-not-print-0123456789"


def key_model(key_file: str) -> str:
    return (
        "models:\n  - name: m\n    upstreams:\n"
        f'      - {{name: u, url: "http://h:1", key_file: {key_file}}}\n'
    )


def test_read_returns_the_content_without_trailing_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text(f"  {SECRET}\n\n")
    assert SecretRef(path=path).read() == f"  {SECRET}"
    assert SecretRef(path=path).problem() is None


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "secret file does not exist"),
        (b" \n\t\n", "secret file is empty"),
        (b"\xff\xfe" + SECRET.encode(), "secret file is not UTF-8 text"),
        (SECRET.encode() * (MAX_SECRET_BYTES // len(SECRET) + 1), "larger than 64 KiB"),
    ],
)
def test_an_unusable_secret_file_names_the_path_never_the_content(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    path = tmp_path / "k"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        SecretRef(path=path).read()
    [diagnostic] = info.value.diagnostics
    assert diagnostic.file == str(path)
    assert reason in diagnostic.message
    assert SECRET not in str(info.value)
    assert SecretRef(path=path).problem() == diagnostic.message


def test_a_directory_or_an_impossible_path_is_not_a_secret_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        SecretRef(path=tmp_path).read()
    assert SecretRef(path=tmp_path / "a\x00b").problem() == "not a valid file path"


def test_relative_paths_resolve_against_the_config_directory(
    load: Load, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "vllm.key").write_text(SECRET + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load(key_model("secrets/vllm.key"))
    ref = cfg.models[0].upstreams[0].key_file
    assert ref is not None
    assert ref.path == tmp_path / "secrets" / "vllm.key"
    assert ref.read() == SECRET
    assert SECRET not in repr(cfg)


def test_missing_and_empty_secret_files_are_reported_at_their_reference(
    problems: Problems, tmp_path: Path
) -> None:
    (tmp_path / "empty.key").write_text("\n")
    found = problems(
        with_minimal(
            """
            master_key_file: missing.key
            cache_isolation: {key_file: empty.key}
            """
        )
    )
    assert found == [
        f"1:18: master_key_file: secret file does not exist: {tmp_path / 'missing.key'}",
        f"2:29: cache_isolation.key_file: secret file is empty: {tmp_path / 'empty.key'}",
    ]


def test_a_vault_reference_without_a_vault_section_is_an_error_at_its_position(
    problems: Problems,
) -> None:
    found = problems(key_model('"vault:secret/engines#vllm"'))
    assert found == [
        "4:48: models[0].upstreams[0].key_file: a vault reference needs a 'vault' section "
        "(its address and credentials)"
    ]


VAULT_SECTION = """\
vault:
  address: https://vault.example:8200
  token_file: vault.token
"""


def test_a_vault_reference_with_a_vault_section_loads_as_a_location(
    load: Load, tmp_path: Path
) -> None:
    (tmp_path / "vault.token").write_text("s.token\n")
    config = load(VAULT_SECTION + key_model('"vault:secret/engines/vllm#key?version=3"'))
    ref = config.models[0].upstreams[0].key_file
    assert ref is not None and ref.path is None
    assert ref.vault == VaultLocation(
        mount="secret", path=("engines", "vllm"), field="key", version=3
    )
    assert str(ref) == "vault:secret/engines/vllm#key?version=3"
    assert config.vault is not None and config.vault.cache_ttl == 300.0


def test_a_vault_secret_not_read_yet_names_the_reference(load: Load, tmp_path: Path) -> None:
    (tmp_path / "vault.token").write_text("s.token\n")
    ref = load(VAULT_SECTION + key_model('"vault:secret/engines#key"')).models[0]
    key_file = ref.upstreams[0].key_file
    assert key_file is not None
    assert key_file.problem() == "vault secret has not been read"
    key_file.cell.set("sk-from-vault")
    assert key_file.read() == "sk-from-vault"


def test_file_prefix_reads_the_same_file(load: Load, tmp_path: Path) -> None:
    (tmp_path / "k").write_text(SECRET + "\n")
    config = load(key_model("file:k"))
    key_file = config.models[0].upstreams[0].key_file
    assert key_file is not None and key_file.read() == SECRET
    assert load(key_model(f"file:{tmp_path / 'k'}")).models[0].upstreams[0].key_file == key_file


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("vault:secret/../sys#x", "at character 14: a path segment may not be '..'"),
        ("vault:secret/a/./b#x", "at character 16: a path segment may not be '.'"),
        ("vault:../secret/a#x", "at character 7: a mount may not be '..'"),
        ("vault:secret/%2e%2e/sys#x", "at character 14: '%' is not allowed in a path segment"),
        ("vault:secret/a//b#x", "at character 16: empty path segment"),
        ("vault:secret/a/#x", "at character 16: empty path segment"),
        ("vault:/secret/a#x", "at character 7: empty mount"),
        ("vault:secret#x", "at character 13: no '/' between the mount and the secret's path"),
        ("vault:secret/a", "at character 15: no '#field' after the secret's path"),
        ("vault:secret/a#", "at character 16: empty field"),
        ("vault:secret/a#f/g", "at character 17: '/' is not allowed in a field"),
        ("vault:secret/a b#f", "at character 15: ' ' is not allowed in a path segment"),
        ("vault:secret/a#f?version=0", "at character 26: the version is a whole number from 1"),
        ("vault:secret/a#f?version=-1", "at character 26: the version is a whole number from 1"),
        ("vault:secret/a#f?ver=1", "at character 18: the only query a reference takes"),
        ("vault:secret/a#f?version=99999999999", "at character 26: the version is too large"),
        ("vault:secret/\u00e9#f", "at character 14: '\u00e9' is not allowed in a path segment"),
        ("vault:secret/a\\b#f", "at character 15: '\\' is not allowed in a path segment"),
    ],
)
def test_a_malformed_vault_reference_is_refused_at_the_character_at_fault(
    problems: Problems, tmp_path: Path, reference: str, message: str
) -> None:
    (tmp_path / "vault.token").write_text("s.token\n")
    found = problems(VAULT_SECTION + key_model(orjson.dumps(reference).decode()))
    assert len(found) == 1, found
    assert found[0].startswith("7:48: models[0].upstreams[0].key_file: malformed vault reference ")
    assert message in found[0]


def test_the_vaults_own_credentials_must_be_files(problems: Problems, tmp_path: Path) -> None:
    found = problems(
        'vault: {address: "https://v:8200", token_file: "vault:secret/t#token"}\n' + MINIMAL
    )
    assert "1:48: vault.token_file: the vault's own credentials must be files" in found[0]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('{address: "http://vault.example:8200", token_file: t}', "must use https://"),
        ('{address: "https://u:p@vault.example", token_file: t}', "must not hold credentials"),
        ('{address: "https://vault.example/v1", token_file: t}', "no path"),
        ('{address: "https://vault.example"}', "needs token_file, or role_id_file"),
        ('{address: "https://v", token_file: t, role_id_file: t, secret_id_file: t}', "not both"),
        ('{address: "https://v", role_id_file: t}', "needs both role_id_file and secret_id_file"),
        ('{address: "https://v", token_file: t, namespace: "a/../b"}', "a namespace is names"),
    ],
)
def test_a_bad_vault_section_is_refused(
    problems: Problems, tmp_path: Path, section: str, message: str
) -> None:
    (tmp_path / "t").write_text("x\n")
    found = problems(f"vault: {section}\n" + MINIMAL)
    assert any(message in line for line in found), found


def test_http_is_accepted_to_loopback(load: Load, tmp_path: Path) -> None:
    (tmp_path / "t").write_text("x\n")
    for host in ("127.0.0.1", "localhost", "[::1]"):
        config = load(f'vault: {{address: "http://{host}:8200", token_file: t}}\n' + MINIMAL)
        assert config.vault is not None


_SEGMENT = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=8)
_NOISE = st.text(alphabet=string.printable + "\u00e9\u2215\uff0e/%#?=.", max_size=40)


@pytest.mark.fuzz
@given(
    st.one_of(
        _NOISE.map(lambda text: "vault:" + text),
        st.lists(st.one_of(_SEGMENT, _NOISE), min_size=1, max_size=6).map(
            lambda parts: "vault:" + "/".join(parts) + "#f"
        ),
    )
)
def test_no_reference_that_parses_names_a_path_outside_its_mount(text: str) -> None:
    try:
        location = parse_vault_reference(text)
    except BadReference as exc:
        assert 1 <= exc.offset <= len(text) + 1
        assert str(exc).startswith("malformed vault reference at character ")
        return
    for name in (location.mount, *location.path, location.field):
        assert name not in ("", ".", "..")
        assert set(name) <= set(string.ascii_letters + string.digits + "._-")
    assert location.version is None or location.version >= 1
    assert str(location) == text


@pytest.mark.fuzz
@given(st.text(max_size=60))
def test_any_text_as_a_key_file_is_loaded_or_diagnosed(text: str) -> None:
    try:
        ref = SecretRef.model_validate(text, context={"base_dir": Path("/")})
    except ValidationError as exc:
        assert exc.error_count() >= 1
        return
    assert (ref.path is None) != (ref.vault is None)


@pytest.mark.parametrize("key", ["api_key", "key", "password", "token", "secret", "master_key"])
def test_inline_secrets_are_refused_without_echoing_them(problems: Problems, key: str) -> None:
    found = problems(f"{key}: {SECRET}\n" + MINIMAL)
    assert found == [
        f"1:1: inline secret '{key}' is not allowed: write it to a file and reference the file "
        "with a '*_file' key such as 'master_key_file'"
    ]


def test_an_inline_upstream_key_points_to_key_file(problems: Problems) -> None:
    found = problems(
        "models:\n  - name: m\n    upstreams:\n"
        f'      - {{name: u, url: "http://h", api_key: {SECRET}}}\n'
    )
    assert found == [
        "4:36: inline secret 'api_key' in 'models[0].upstreams[0]' is not allowed: write it to a "
        "file and reference the file with a '*_file' key such as 'key_file'"
    ]


def test_secret_references_must_be_paths(problems: Problems) -> None:
    found = problems("master_key_file: 42\n" + MINIMAL)
    assert found == ["1:18: master_key_file: expected the path of a secret file, got 42"]
