"""Durations written as strings in the configuration: ``250ms``, ``30s``, ``5m``, ``168h``, ``7d``.

parse_duration("1h30m") == 5400.0
"""

from __future__ import annotations

import re

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ``ValueError`` with a readable reason otherwise."""
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    pos = 0
    total = 0.0
    for match in _PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(s) or pos == 0:
        raise ValueError(f"not a duration: {text!r} (use e.g. 250ms, 30s, 5m, 168h, 7d)")
    return total


def format_duration(seconds: float) -> str:
    """A short human form, the inverse of ``parse_duration`` for whole units."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{round(seconds * 1000)}ms"
