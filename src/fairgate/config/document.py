"""YAML text → a plain tree of dicts, lists and scalars, with the position of every key and value.

The tree is built from the parser's events, not by a YAML constructor, so that
nothing in the file can construct an object and every position is known:

- **tags** (``!!python/object``, ``!!str``, ``!custom``) are refused: a configuration
  holds plain values only;
- **anchors, aliases and merge keys** (``&x``, ``*x``, ``<<``) are refused: a value
  defined in one place and used in another has no single position to report, and
  aliases can expand a small file into a huge tree;
- **duplicate keys** are refused with both positions (YAML loaders usually keep the
  last one silently);
- **plain scalars** resolve by the YAML 1.2 core schema only: null, booleans
  (``true``/``false``, not ``yes``/``no``), integers, floats; anything else, dates
  included, stays a string. Quoted and block scalars are always strings.

Problems are collected, not raised: one pass reports all of them.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from fairgate.config.diagnostics import Diagnostic, Mark

__all__ = ["Document", "Loc", "dotted", "parse_document", "plain_scalar"]

Loc = tuple[str | int, ...]
"""A path into the tree: keys and list indices, as in pydantic's error ``loc``."""

_MAX_DEPTH = 32
_NULL = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE = frozenset({"true", "True", "TRUE"})
_FALSE = frozenset({"false", "False", "FALSE"})
_INT = re.compile(r"[-+]?[0-9]+")
_OCT = re.compile(r"0o[0-7]+")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INF = re.compile(r"([-+]?)\.(inf|Inf|INF)")
_NAN = re.compile(r"\.(nan|NaN|NAN)")


def dotted(loc: Loc) -> str:
    """``loc`` as a user reads it: ``models[0].upstreams[1].url``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def plain_scalar(text: str) -> bool | int | float | str | None:
    """The value of an unquoted scalar under the YAML 1.2 core schema."""
    if text in _NULL:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if _INT.fullmatch(text):
        return int(text)
    if _OCT.fullmatch(text):
        return int(text[2:], 8)
    if _HEX.fullmatch(text):
        return int(text[2:], 16)
    if _FLOAT.fullmatch(text):
        return float(text)
    if inf := _INF.fullmatch(text):
        return float(f"{inf.group(1)}inf")
    if _NAN.fullmatch(text):
        return float("nan")
    return text


@dataclass
class Document:
    """A parsed configuration source.

    ``tree`` is the top-level value (a dict for a usable file); ``value_marks``
    and ``key_marks`` give the position of the value and of the key at each
    :data:`Loc`; ``diagnostics`` lists what the parser refused. ``broken`` is
    true after a syntax error: the tree is then partial and not worth checking.
    """

    file: str
    tree: Any = None
    broken: bool = False
    value_marks: dict[Loc, Mark] = field(default_factory=dict)
    key_marks: dict[Loc, Mark] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def value_mark(self, loc: Loc) -> Mark:
        """Where the value at ``loc`` is, or the nearest enclosing value that exists."""
        return self._nearest(self.value_marks, loc)

    def key_mark(self, loc: Loc) -> Mark:
        """Where the key of ``loc`` is (a list item has no key: its value then)."""
        if loc in self.key_marks:
            return self.key_marks[loc]
        return self._nearest(self.value_marks, loc)

    def _nearest(self, marks: dict[Loc, Mark], loc: Loc) -> Mark:
        for end in range(len(loc), 0, -1):
            mark = marks.get(loc[:end])
            if mark is not None:
                return mark
        return marks.get((), Mark(self.file, 1, 1))


def parse_document(text: str, file: str) -> Document:
    """Parse ``text`` (named ``file`` in diagnostics); never raises for bad input."""
    doc = Document(file)
    events = YAML(typ="safe", pure=True).parse(io.StringIO(text))
    builder = _Builder(doc, iter(events))
    try:
        builder.build()
    except MarkedYAMLError as exc:
        doc.broken = True
        mark = exc.problem_mark or exc.context_mark
        where = Mark(file, mark.line + 1, mark.column + 1) if mark else Mark(file, 1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        doc.diagnostics.append(Diagnostic.at(where, f"invalid YAML: {problem}"))
    except YAMLError as exc:
        doc.broken = True
        doc.diagnostics.append(Diagnostic.at(Mark(file, 1, 1), f"invalid YAML: {exc}"))
    return doc


def _tag_name(tag: object) -> str:
    text = str(tag)
    prefix = "tag:yaml.org,2002:"
    return "!!" + text[len(prefix) :] if text.startswith(prefix) else text


class _Builder:
    def __init__(self, doc: Document, events: Iterator[Event]) -> None:
        self._doc = doc
        self._events = events
        self._seen_document = False

    def _mark(self, event: Event) -> Mark:
        return Mark(self._doc.file, event.start_mark.line + 1, event.start_mark.column + 1)

    def _refuse(self, event: Event, message: str) -> None:
        self._doc.diagnostics.append(Diagnostic.at(self._mark(event), message))

    def build(self) -> None:
        for event in self._events:
            if isinstance(event, DocumentStartEvent):
                if self._seen_document:
                    self._refuse(event, "only one YAML document is allowed in the file")
                    return
                self._seen_document = True
                self._doc.tree = self._node(next(self._events), (), 0)
            elif isinstance(event, StreamEndEvent):
                return

    def _node(self, event: Event, loc: Loc, depth: int) -> Any:
        self._doc.value_marks[loc] = self._mark(event)
        self._check_decorations(event)
        if isinstance(event, AliasEvent):
            self._refuse(
                event, f"YAML alias '*{event.anchor}' is not supported: write the value out"
            )
            return None
        if depth >= _MAX_DEPTH and isinstance(event, MappingStartEvent | SequenceStartEvent):
            self._refuse(event, f"nested deeper than {_MAX_DEPTH} levels")
            self._skip_collection()
            return None
        if isinstance(event, MappingStartEvent):
            return self._mapping(loc, depth)
        if isinstance(event, SequenceStartEvent):
            return self._sequence(loc, depth)
        assert isinstance(event, ScalarEvent)
        if event.style is None and event.implicit[0]:
            return plain_scalar(event.value)
        return event.value

    def _check_decorations(self, event: Event) -> None:
        tag = getattr(event, "tag", None)
        if tag is not None:
            self._refuse(event, f"YAML tag '{_tag_name(tag)}' is not allowed: write a plain value")
        anchor = getattr(event, "anchor", None)
        if anchor is not None and not isinstance(event, AliasEvent):
            self._refuse(event, f"YAML anchor '&{anchor}' is not supported: write the value out")

    def _mapping(self, loc: Loc, depth: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_seen: dict[str, Mark] = {}
        while not isinstance(key_event := next(self._events), MappingEndEvent):
            key = self._key(key_event)
            value_event = next(self._events)
            if key is None:
                self._skip(value_event)
                continue
            key_mark = self._mark(key_event)
            if key in first_seen:
                first = first_seen[key]
                self._refuse(
                    key_event,
                    f"duplicate key '{key}' (first defined at {first.line}:{first.column})",
                )
                self._skip(value_event)
                continue
            first_seen[key] = key_mark
            self._doc.key_marks[(*loc, key)] = key_mark
            result[key] = self._node(value_event, (*loc, key), depth + 1)
        return result

    def _key(self, event: Event) -> str | None:
        """The key's text, or None (after a diagnostic) when it cannot be a key."""
        if not isinstance(event, ScalarEvent):
            self._check_decorations(event)
            self._refuse(event, "a mapping key must be a plain name, not a list or a mapping")
            self._skip(event)
            return None
        self._check_decorations(event)
        if event.value == "<<" and event.style is None:
            self._refuse(event, "YAML merge keys ('<<') are not supported: write the keys out")
            return None
        return str(event.value)

    def _sequence(self, loc: Loc, depth: int) -> list[Any]:
        result: list[Any] = []
        while not isinstance(event := next(self._events), SequenceEndEvent):
            result.append(self._node(event, (*loc, len(result)), depth + 1))
        return result

    def _skip(self, event: Event) -> None:
        if isinstance(event, MappingStartEvent | SequenceStartEvent):
            self._skip_collection()

    def _skip_collection(self) -> None:
        open_collections = 1
        while open_collections:
            event = next(self._events)
            if isinstance(event, MappingStartEvent | SequenceStartEvent):
                open_collections += 1
            elif isinstance(event, MappingEndEvent | SequenceEndEvent):
                open_collections -= 1
