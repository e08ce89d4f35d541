"""docs/configuration.md describes every key of the schema, so none can go undocumented."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from fairgate.config import Config
from fairgate.config.schema import field_kind, keys_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def key_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key as written in the docs: ``limits.idle_timeout``, ``models[].upstreams[].url``."""
    for key, annotation in keys_of(model).items():
        path = prefix + key
        yield path
        kind, inner = field_kind(annotation)
        if kind == "section" and inner is not None:
            yield from key_paths(inner, path + ".")
        elif kind == "list" and inner is not None:
            yield from key_paths(inner, path + "[].")


def test_the_walk_sees_nested_keys() -> None:
    paths = set(key_paths(Config))
    assert {"listen.port", "models[].class", "models[].upstreams[].key_file"} <= paths
    assert "admission.bands[].ceiling" in paths
    assert "path" not in paths  # filled by the loader, not a key of the file


def test_every_key_is_in_the_reference_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [path for path in key_paths(Config) if f"| `{path}` |" not in text]
    assert missing == []


def test_the_reference_names_no_key_the_schema_lacks() -> None:
    known = set(key_paths(Config))
    rows = [line for line in DOC.read_text(encoding="utf-8").splitlines() if line.startswith("| `")]
    documented = {row.split("`")[1] for row in rows}
    variables_and_files = {d for d in documented if d.startswith(("FAIRGATE_", "examples/"))}
    assert documented - variables_and_files - known == set()
