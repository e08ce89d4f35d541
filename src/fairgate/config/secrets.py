"""Secrets by reference: a ``*_file`` key names a file holding the secret, never the secret itself.

Keeping secrets out of the configuration file means the file can be reviewed,
versioned and printed, and that no diagnostic can echo a secret: messages name
the file, never its content. ``vault:mount/path#field`` references are
recognised and refused as not supported yet, with their position.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from fairgate.config.diagnostics import ConfigError, Diagnostic, Mark
from fairgate.config.document import Document, Loc, dotted
from fairgate.config.fields import describe

__all__ = ["MAX_SECRET_BYTES", "SecretRef", "secret_file_diagnostics"]

MAX_SECRET_BYTES = 64 * 1024
"""A secret file larger than this is refused: keys, URLs and tokens are small."""

_VAULT_PREFIX = "vault:"


class SecretRef(BaseModel):
    """A secret held in a file.

    Written in the configuration as a path (``key_file: secrets/vllm.key``);
    a relative path is resolved against the directory of the configuration
    file when the configuration is loaded. :meth:`read` returns the content
    with trailing whitespace (the usual final newline) stripped, and raises
    :class:`ConfigError` naming the path — never the content — when the file
    is missing, unreadable, not UTF-8, larger than 64 KiB or empty. The
    object holds only the path, so printing it reveals nothing secret.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path

    @model_validator(mode="before")
    @classmethod
    def _from_reference(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, SecretRef | Mapping):
            return value
        if isinstance(value, Path):
            return {"path": value}
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected the path of a secret file, got {describe(value)}")
        if value.startswith(_VAULT_PREFIX):
            raise ValueError("Vault references ('vault:…') are not supported yet: use a file path")
        base = info.context.get("base_dir") if isinstance(info.context, Mapping) else None
        return {"path": _resolve(value, base)}

    def problem(self) -> str | None:
        """Why :meth:`read` would fail, or None when the secret is readable."""
        try:
            self._read()
        except ConfigError as exc:
            return exc.diagnostics[0].message
        return None

    def read(self) -> str:
        """The secret, without trailing whitespace; :class:`ConfigError` when unusable."""
        return self._read()

    def _read(self) -> str:
        try:
            with self.path.open("rb") as handle:
                data = handle.read(MAX_SECRET_BYTES + 1)
        except FileNotFoundError:
            raise self._error("secret file does not exist") from None
        except IsADirectoryError:
            raise self._error("secret file is a directory") from None
        except OSError as exc:
            raise self._error(f"cannot read secret file: {exc.strerror or exc}") from None
        except ValueError:  # a NUL byte in the path
            raise self._error("not a valid file path") from None
        if len(data) > MAX_SECRET_BYTES:
            raise self._error("secret file is larger than 64 KiB")
        try:
            text = data.decode("utf-8").rstrip()
        except UnicodeDecodeError:
            raise self._error("secret file is not UTF-8 text") from None
        if not text:
            raise self._error("secret file is empty")
        return text

    def _error(self, message: str) -> ConfigError:
        return ConfigError([Diagnostic.at(Mark(str(self.path), 0, 0), message)])


def _resolve(text: str, base: object) -> Path:
    path = Path(text)
    if not path.is_absolute() and isinstance(base, Path):
        path = base / path
    return path


def secret_file_diagnostics(doc: Document, base_dir: Path) -> list[Diagnostic]:
    """One diagnostic per ``*_file`` value in the tree whose file cannot be read.

    Checks every key ending in ``_file`` wherever it appears, so a new secret
    reference is checked without being listed here; values that are not
    usable paths are left to the schema, which reports them.
    """
    found: list[Diagnostic] = []
    for loc, value in _file_references(doc.tree, ()):
        ref = SecretRef(path=_resolve(value, base_dir))
        reason = ref.problem()
        if reason is not None:
            message = f"{dotted(loc)}: {reason}: {ref.path}"
            found.append(Diagnostic.at(doc.value_mark(loc), message))
    return found


def _file_references(node: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            here = (*loc, key)
            if key.endswith("_file") and isinstance(value, str) and value.strip():
                if not value.startswith(_VAULT_PREFIX):
                    yield here, value
            else:
                yield from _file_references(value, here)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _file_references(item, (*loc, index))
