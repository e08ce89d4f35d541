"""Pydantic validation errors → diagnostics a person can act on, at the right position.

Each error's ``loc`` is looked up in the document: an unknown key points at the
key, a wrong value at the value, a missing key at the mapping that lacks it.
Messages say what was expected and what was found (``expected an integer, got
'abc'``), suggest the closest key or choice for a typo, and never repeat the
value of a key that looks like an inline secret.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from pydantic_core import ErrorDetails

from fairgate.config.diagnostics import Diagnostic
from fairgate.config.document import Document, Loc, dotted
from fairgate.config.fields import describe
from fairgate.config.schema import keys_of, model_at

__all__ = ["explain", "suggestion"]

_SECRET_NAME = re.compile(r"(^|_)(key|api_?key|password|passwd|token|secret)$", re.IGNORECASE)

_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "dict_type": "a mapping",
    "path_type": "a file path",
}

_BOUND = {
    "greater_than": ("gt", "must be greater than"),
    "greater_than_equal": ("ge", "must be at least"),
    "less_than": ("lt", "must be less than"),
    "less_than_equal": ("le", "must be at most"),
}


def suggestion(word: str, choices: list[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def explain(error: ErrorDetails, doc: Document) -> Diagnostic:
    """One pydantic error as a diagnostic at the position of its key or value in ``doc``."""
    loc: Loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return Diagnostic.at(doc.key_mark(loc), _unknown_key(loc))
    if kind == "missing":
        parent = loc[:-1]
        where = f" in '{dotted(parent)}'" if parent else ""
        return Diagnostic.at(doc.value_mark(parent), f"missing required key '{loc[-1]}'{where}")
    return Diagnostic.at(doc.value_mark(loc), f"{dotted(loc)}: {_problem(error)}")


def _unknown_key(loc: Loc) -> str:
    key, parent = str(loc[-1]), loc[:-1]
    model = model_at(parent)
    known = sorted(keys_of(model)) if model is not None else []
    in_parent = f" in '{dotted(parent)}'" if parent else ""
    if _SECRET_NAME.search(key):
        files = [k for k in known if k.endswith("_file")]
        # the key's own ``*_file`` twin when there is one (``metrics_token``), else the first
        named = f"{key}_file" if f"{key}_file" in files else (files[0] if files else None)
        hint = f" such as '{named}'" if named else ""
        return (
            f"inline secret '{key}'{in_parent} is not allowed: write it to a file and "
            f"reference the file with a '*_file' key{hint}"
        )
    return f"unknown key '{key}'{in_parent}{suggestion(key, known)}"


def _whole(bound: Any) -> Any:
    """``0`` rather than ``0.0`` for a bound of a float field."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound


def _problem(error: ErrorDetails) -> str:
    kind = error["type"]
    value: Any = error.get("input")
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {describe(value)}"
    if kind == "finite_number":
        return f"expected a finite number, got {describe(value)}"
    if kind in _BOUND:
        name, phrase = _BOUND[kind]
        return f"{phrase} {describe(_whole(ctx.get(name)))}, got {describe(value)}"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        listed = ", ".join(f"'{c}'" for c in choices)
        hint = suggestion(value, choices) if isinstance(value, str) else ""
        return f"expected one of {listed}, got {describe(value)}{hint}"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", error["msg"]))
    return str(error["msg"])
