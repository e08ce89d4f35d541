"""``load_config``: one YAML file and the environment → a validated, frozen :class:`Config`.

The steps, each collecting diagnostics rather than stopping at the first:
parse the YAML (refusing tags, anchors, duplicate keys), apply ``FAIRGATE_…``
overrides, check the cross-entry rules, validate the schema, check that every
secret file exists and is non-empty, check that the listeners' TLS certificates
and keys load. Any diagnostic → :class:`ConfigError`
with all of them, sorted by position.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fairgate.config.diagnostics import ConfigError, Diagnostic, Mark
from fairgate.config.document import Document, parse_document
from fairgate.config.environment import apply_overrides
from fairgate.config.fields import FROM_FILE
from fairgate.config.messages import explain
from fairgate.config.rules import check_rules
from fairgate.config.schema import Config, field_kind, keys_of
from fairgate.config.secrets import secret_file_diagnostics
from fairgate.config.tls import tls_diagnostics

__all__ = ["MAX_CONFIG_BYTES", "load_config"]

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A configuration file larger than this is refused before parsing."""


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """The configuration in ``path`` with the ``FAIRGATE_…`` overrides found in ``env``.

    ``env`` is passed in (usually ``os.environ``); nothing here reads the
    process environment. Relative secret paths resolve against the file's
    directory. Raises :class:`ConfigError` listing every problem found.
    """
    path = Path(path)
    doc = parse_document(_read(path), str(path))
    diagnostics = list(doc.diagnostics)
    if doc.broken or not isinstance(doc.tree, dict):
        if not diagnostics:
            what = "empty" if doc.tree is None else "not a mapping of sections"
            diagnostics.append(Diagnostic.at(doc.value_mark(()), f"the configuration is {what}"))
        raise ConfigError(diagnostics)
    if "path" in doc.tree:
        diagnostics.append(Diagnostic.at(doc.key_mark(("path",)), "unknown key 'path'"))
        del doc.tree["path"]
    diagnostics += apply_overrides(doc, env or {})
    _empty_sections_to_defaults(doc.tree)
    diagnostics += [Diagnostic.at(doc.value_mark(loc), m) for loc, m in check_rules(doc.tree)]
    base_dir = path.absolute().parent
    diagnostics += secret_file_diagnostics(doc, base_dir)
    config = _validate(doc, path, base_dir, diagnostics)
    if config is not None:
        listeners = {"listen": config.listen.tls, "admin_listen": config.admin_listen.tls}
        diagnostics += tls_diagnostics(doc, listeners)
    if diagnostics or config is None:
        raise ConfigError(_ordered(diagnostics))
    return config


def _read(path: Path) -> str:
    def refuse(reason: str) -> ConfigError:
        return ConfigError([Diagnostic.at(Mark(str(path), 0, 0), reason)])

    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise refuse("configuration file not found") from None
    except IsADirectoryError:
        raise refuse("is a directory, not a configuration file") from None
    except OSError as exc:
        raise refuse(f"cannot read the configuration file: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path
        raise refuse("not a valid file path") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise refuse("configuration file is larger than 4 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(f"configuration file is not UTF-8 text (byte {exc.start})") from None


def _empty_sections_to_defaults(tree: dict[str, Any]) -> None:
    """``limits:`` with every key commented out means the defaults, not an error."""
    for key, annotation in keys_of(Config).items():
        if key in tree and tree[key] is None:
            kind = field_kind(annotation)[0]
            if kind == "section":
                tree[key] = {}
            elif kind == "list":
                tree[key] = []


def _validate(
    doc: Document, path: Path, base_dir: Path, diagnostics: list[Diagnostic]
) -> Config | None:
    try:
        return Config.model_validate(
            {**doc.tree, "path": path},
            context={"base_dir": base_dir, FROM_FILE: True},
            by_name=False,
        )
    except ValidationError as exc:
        diagnostics += [explain(error, doc) for error in exc.errors(include_url=False)]
        return None


def _ordered(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """File positions first, in reading order, then environment variables; no repeats."""
    unique = list(dict.fromkeys(diagnostics))
    return sorted(unique, key=lambda d: (d.line == 0, d.file, d.line, d.column))
