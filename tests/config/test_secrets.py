"""Secrets by reference: files checked at load time, content never printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgate.config import ConfigError, SecretRef
from fairgate.config.secrets import MAX_SECRET_BYTES

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


def test_vault_references_are_recognised_and_not_supported_yet(problems: Problems) -> None:
    found = problems(key_model('"vault:secret/engines#vllm"'))
    assert found == [
        "4:48: models[0].upstreams[0].key_file: Vault references ('vault:…') are not supported "
        "yet: use a file path"
    ]


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
