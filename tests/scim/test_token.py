"""The provider's bearer token: one shorter than 32 bytes stops the start-up, naming the
reference and the length, never the token."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgate.config import ConfigError
from fairgate.config.scim import Scim
from fairgate.scim import scim_token


def _config(tmp_path: Path, token: str) -> Scim:
    path = tmp_path / "scim.token"
    path.write_text(token + "\n")
    return Scim.model_validate({"token_file": str(path)})


def test_a_token_shorter_than_32_bytes_is_refused_without_showing_it(tmp_path: Path) -> None:
    short = "s3cr3t-" + "x" * 24  # 31 bytes
    with pytest.raises(ConfigError) as refused:
        scim_token(_config(tmp_path, short))
    text = str(refused.value)
    assert "at least 32 bytes" in text and "(it has 31)" in text
    assert short not in text


def test_a_token_of_32_bytes_is_taken(tmp_path: Path) -> None:
    token = "s3cr3t-" + "x" * 25
    assert scim_token(_config(tmp_path, token)) == token
