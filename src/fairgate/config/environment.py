"""``FAIRGATE_…`` environment variables override scalar settings of the file.

- ``FAIRGATE_<SECTION>__<KEY>=value`` sets ``<key>`` in the mapping section
  ``<section>`` (names are case-insensitive; a double underscore separates
  them because section names contain single ones): ``FAIRGATE_LISTEN__PORT=9000``,
  ``FAIRGATE_LIMITS__IDLE_TIMEOUT=10s``, ``FAIRGATE_ADMIN_LISTEN__HOST=0.0.0.0``.
- ``FAIRGATE_<KEY>=value`` sets a top-level scalar: ``FAIRGATE_MASTER_KEY_FILE``.
- Values are read as plain YAML scalars: ``9000`` is an integer, ``true`` a
  boolean, ``null`` resets a key to its default, anything else is a string.
- Lists (``models``, ``pools``, ``orgs``, ``admission.bands``) and whole
  sections are not overridable.
- An unknown section or key is an error naming the variable. Other
  ``FAIRGATE_`` variables (``FAIRGATE_CONFIG``, read by the command line, and
  variables of tools and tests) are not overrides and are left alone, except a
  name that starts with a section and a single underscore
  (``FAIRGATE_LISTEN_PORT``), which is refused as a likely typo.

Diagnostics for overridden values point at ``env:FAIRGATE_…``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fairgate.config.diagnostics import Diagnostic, Mark
from fairgate.config.document import Document, plain_scalar
from fairgate.config.messages import suggestion
from fairgate.config.schema import Config, field_kind, keys_of

__all__ = ["PREFIX", "apply_overrides"]

PREFIX = "FAIRGATE_"


def apply_overrides(doc: Document, env: Mapping[str, str]) -> list[Diagnostic]:
    """Set every override found in ``env`` into ``doc.tree``; diagnostics for refused ones."""
    assert isinstance(doc.tree, dict)
    found: list[Diagnostic] = []
    top = keys_of(Config)
    sections = sorted(k for k, a in top.items() if field_kind(a)[0] == "section")
    for variable in sorted(env):
        if not variable.startswith(PREFIX):
            continue
        mark = Mark(f"env:{variable}", 0, 0)
        parts = variable[len(PREFIX) :].lower().split("__")
        if len(parts) == 1:
            key = parts[0]
            if key in top and field_kind(top[key])[0] == "scalar":
                _set(doc, (key,), env[variable], mark)
            elif typo := next((s for s in sections if key.startswith(s + "_")), None):
                better = f"{PREFIX}{typo.upper()}__{key[len(typo) + 1 :].upper()}"
                found.append(Diagnostic.at(mark, f"not an override: did you mean {better}?"))
            continue
        problem = _refusal(parts, top)
        if problem is not None:
            found.append(Diagnostic.at(mark, problem))
        elif isinstance(doc.tree.get(parts[0]), dict | None):
            _set(doc, (parts[0], parts[1]), env[variable], mark)
    return found


def _refusal(parts: list[str], top: dict[str, Any]) -> str | None:
    """Why ``FAIRGATE_<parts joined by __>`` cannot override anything, or None."""
    if len(parts) != 2 or not all(parts):
        return "expected FAIRGATE_<SECTION>__<KEY> with one double underscore"
    section, key = parts
    if section not in top:
        return f"unknown section '{section}'{suggestion(section, sorted(top))}"
    kind, model = field_kind(top[section])
    if kind != "section" or model is None:
        return f"'{section}' is {'a list' if kind == 'list' else 'not a section'}: not overridable"
    keys = keys_of(model)
    if key not in keys:
        return f"unknown key '{key}' in '{section}'{suggestion(key, sorted(keys))}"
    if field_kind(keys[key])[0] != "scalar":
        return f"'{section}.{key}' is not a scalar setting: not overridable"
    return None


def _set(doc: Document, loc: tuple[str, ...], text: str, mark: Mark) -> None:
    node: Any = doc.tree
    for depth, step in enumerate(loc[:-1]):
        if node.get(step) is None:
            node[step] = {}
            doc.value_marks[loc[: depth + 1]] = mark
        node = node[step]
    node[loc[-1]] = plain_scalar(text.strip())
    doc.value_marks[loc] = mark
    doc.key_marks[loc] = mark
