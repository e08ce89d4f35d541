"""Secrets by reference: a ``*_file`` key names where the secret is, never the secret itself.

Keeping secrets out of the configuration file means the file can be reviewed,
versioned and printed, and that no diagnostic can echo a secret: messages name
the reference, never its content. A reference is one of::

    secrets/vllm.key                         a file (relative to the configuration's directory)
    file:/run/secrets/vllm.key               the same, spelled explicitly
    vault:secret/engines/vllm#key            field ``key`` of the KV v2 secret ``engines/vllm``
    vault:secret/engines/vllm#key?version=3  that secret's version 3, pinned

The vault grammar is strict so that no reference can name a path outside its
mount: the mount, each path segment and the field are made of ``A-Z a-z 0-9 .
_ -`` only, a segment is never ``.`` or ``..``, and nothing is percent-decoded.
A file is read when :meth:`SecretRef.read` is called; a vault secret is read by
:mod:`fairgate.vault` into the reference's :class:`SecretCell`, which
:meth:`SecretRef.read` then returns and which the refresher updates in place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationInfo, model_validator

from fairgate.config.diagnostics import ConfigError, Diagnostic, Mark
from fairgate.config.document import Document, Loc, dotted
from fairgate.config.fields import describe

__all__ = [
    "MAX_SECRET_BYTES",
    "BadReference",
    "SecretCell",
    "SecretRef",
    "VaultLocation",
    "parse_vault_reference",
    "secret_file_diagnostics",
]

MAX_SECRET_BYTES = 64 * 1024
"""A secret larger than this is refused: keys, URLs and tokens are small."""

VAULT_PREFIX = "vault:"
_FILE_PREFIX = "file:"
_NAME = re.compile(r"[A-Za-z0-9._-]+")
_MAX_SEGMENTS = 32
_MAX_VERSION = 2**31 - 1
_SPELLING = "use A-Z a-z 0-9 . _ - only"


class BadReference(ValueError):
    """A malformed reference; ``offset`` is the 1-based character the problem starts at."""

    def __init__(self, offset: int, problem: str) -> None:
        super().__init__(f"malformed vault reference at character {offset}: {problem}")
        self.offset = offset


class VaultLocation(BaseModel):
    """Where a vault secret is: ``mount``, ``path`` segments, ``field``, optional ``version``.

    ``str()`` gives the reference back as written (``vault:secret/a/b#f?version=2``),
    which is what every message names.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mount: str
    path: tuple[str, ...]
    field: str
    version: int | None = None

    def __str__(self) -> str:
        pinned = "" if self.version is None else f"?version={self.version}"
        return f"{VAULT_PREFIX}{self.mount}/{'/'.join(self.path)}#{self.field}{pinned}"


def parse_vault_reference(text: str) -> VaultLocation:
    """``vault:mount/path…#field[?version=N]`` → its location; :class:`BadReference` otherwise."""
    if not text.startswith(VAULT_PREFIX):
        raise BadReference(1, "a vault reference starts with 'vault:'")
    body = text[len(VAULT_PREFIX) :]
    start = len(VAULT_PREFIX) + 1  # 1-based offset of body[0]
    where, hash_sign, rest = body.partition("#")
    if not hash_sign:
        raise BadReference(start + len(body), "no '#field' after the secret's path")
    field, question, query = rest.partition("?")
    version = _version(query, start + len(where) + 1 + len(field) + 1) if question else None
    segments = where.split("/")
    offsets = [start]
    for segment in segments[:-1]:
        offsets.append(offsets[-1] + len(segment) + 1)
    if len(segments) < 2:
        raise BadReference(start + len(where), "no '/' between the mount and the secret's path")
    if len(segments) > _MAX_SEGMENTS:
        raise BadReference(start, f"more than {_MAX_SEGMENTS} path segments")
    for segment, offset in zip(segments, offsets, strict=True):
        _name(segment, offset, "mount" if offset == start else "path segment")
    _name(field, start + len(where) + 1, "field")
    return VaultLocation(mount=segments[0], path=tuple(segments[1:]), field=field, version=version)


def _name(value: str, offset: int, what: str) -> None:
    if not value:
        raise BadReference(offset, f"empty {what}")
    match = _NAME.match(value)
    bad = match.end() if match else 0
    if bad < len(value):
        shown = value[bad] if value[bad].isprintable() else f"U+{ord(value[bad]):04X}"
        raise BadReference(offset + bad, f"'{shown}' is not allowed in a {what} ({_SPELLING})")
    if value in (".", ".."):
        raise BadReference(offset, f"a {what} may not be '{value}'")


def _version(query: str, offset: int) -> int:
    name, _, number = query.partition("=")
    if name != "version":
        raise BadReference(offset, "the only query a reference takes is '?version=N'")
    offset += len("version=")
    if not number.isascii() or not number.isdigit() or number.startswith("0"):
        raise BadReference(offset, "the version is a whole number from 1")
    if len(number) > 10 or int(number) > _MAX_VERSION:
        raise BadReference(offset, "the version is too large")
    return int(number)


class SecretCell:
    """The current value of one vault secret, shared by the references naming it.

    ``value`` is None until the secret is first read. :meth:`set` replaces it and
    calls every listener registered with :meth:`on_change` with the new value (the
    consumers that precompute from a secret, such as a header or a hash, rebuild
    there, so the request path only reads an attribute). Cells compare equal to
    each other so that two equal configurations stay equal once read.
    """

    __slots__ = ("_listeners", "value")

    def __init__(self) -> None:
        self.value: str | None = None
        self._listeners: list[Callable[[str], None]] = []

    def set(self, value: str) -> bool:
        """Store ``value``; True (and listeners called) when it differs from the last one."""
        if value == self.value:
            return False
        self.value = value
        for listener in self._listeners:
            listener(value)
        return True

    def on_change(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretCell)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "SecretCell(read)" if self.value is not None else "SecretCell(unread)"


class SecretRef(BaseModel):
    """A secret held in a file or in a vault.

    Written in the configuration as a reference (see the module docstring); a
    relative path is resolved against the directory of the configuration file
    when the configuration is loaded. :meth:`read` returns the secret with
    trailing whitespace (the usual final newline) stripped, and raises
    :class:`ConfigError` naming the reference — never the content — when it is
    unusable: a file missing, unreadable, not UTF-8, larger than 64 KiB or
    empty; a vault secret not read yet. The object holds only the reference
    (and, for a vault secret, its cell), so printing it reveals nothing secret.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path | None = None
    vault: VaultLocation | None = None

    _cell: SecretCell = PrivateAttr(default_factory=SecretCell)

    @model_validator(mode="before")
    @classmethod
    def _from_reference(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, SecretRef | Mapping):
            return value
        if isinstance(value, Path):
            return {"path": value}
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected the path of a secret file, got {describe(value)}")
        if value.startswith(VAULT_PREFIX):
            return {"vault": parse_vault_reference(value)}
        if value.startswith(_FILE_PREFIX):
            value = value[len(_FILE_PREFIX) :]
            if not value.strip():
                raise ValueError("'file:' is followed by no path")
        base = info.context.get("base_dir") if isinstance(info.context, Mapping) else None
        return {"path": _resolve(value, base)}

    @model_validator(mode="after")
    def _one_place(self) -> SecretRef:
        if (self.path is None) == (self.vault is None):
            raise ValueError("a secret reference is a file path or a vault location")
        return self

    @property
    def cell(self) -> SecretCell:
        """The current value of a vault secret (unused for a file)."""
        return self._cell

    def __str__(self) -> str:
        return str(self.vault) if self.vault is not None else str(self.path)

    def problem(self) -> str | None:
        """Why :meth:`read` would fail, or None when the secret is readable."""
        try:
            self.read()
        except ConfigError as exc:
            return exc.diagnostics[0].message
        return None

    def read(self) -> str:
        """The secret, without trailing whitespace; :class:`ConfigError` when unusable.

        A file is read at each call; a vault secret is the value last read from
        the vault (no I/O here).
        """
        if self.vault is not None:
            if self._cell.value is None:
                raise self._error("vault secret has not been read")
            return self._cell.value
        return self._read_file()

    def _read_file(self) -> str:
        assert self.path is not None
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
        return ConfigError([Diagnostic.at(Mark(str(self), 0, 0), message)])


def _resolve(text: str, base: object) -> Path:
    path = Path(text)
    if not path.is_absolute() and isinstance(base, Path):
        path = base / path
    return path


def secret_file_diagnostics(doc: Document, base_dir: Path) -> list[Diagnostic]:
    """One diagnostic per ``*_file`` value in the tree that cannot be used.

    Checks every key ending in ``_file`` wherever it appears, so a new secret
    reference is checked without being listed here: a file must be readable; a
    vault reference needs a ``vault`` section. Malformed references are left to
    the schema, which reports them; vault secrets are read by :mod:`fairgate.vault`.
    """
    found: list[Diagnostic] = []
    has_vault = isinstance(doc.tree, dict) and isinstance(doc.tree.get("vault"), dict)
    for loc, value in _file_references(doc.tree, ()):
        if value.startswith(VAULT_PREFIX):
            if not has_vault:
                reason = "a vault reference needs a 'vault' section (its address and credentials)"
                found.append(Diagnostic.at(doc.value_mark(loc), f"{dotted(loc)}: {reason}"))
            continue
        if value.startswith(_FILE_PREFIX):
            value = value[len(_FILE_PREFIX) :]
            if not value.strip():
                continue
        ref = SecretRef(path=_resolve(value, base_dir))
        problem = ref.problem()
        if problem is not None:
            message = f"{dotted(loc)}: {problem}: {ref.path}"
            found.append(Diagnostic.at(doc.value_mark(loc), message))
    return found


def _file_references(node: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            here = (*loc, key)
            if key.endswith("_file") and isinstance(value, str) and value.strip():
                yield here, value
            else:
                yield from _file_references(value, here)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _file_references(item, (*loc, index))
