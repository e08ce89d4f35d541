"""Saved counters: what a back end that lives in memory writes away to survive a restart.

A ``SavedCounter`` is one counter as JSON-ready data, whatever limit it serves
(a key's RPM, a team's TPM, a budget's period…): the snapshot is generic over
the counters, so a new kind of limit is saved with no change here. In-flight
slots are never saved: they die with the process that held them.

    window  {"length": 60.0, "granules": 60, "buckets": [[bucket, weight], …]}
    period  {"value": 12, "keep_until": 1767225600.0}
    usage   {"org": "etabA", "value": 3.5, "at": 1767225600.0, "half_life": 604800.0}
            (fair-share decayed usage; the key is the pool)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["CounterKind", "SavedCounter"]

CounterKind = Literal["window", "period", "usage"]


@dataclass(frozen=True, slots=True)
class SavedCounter:
    key: str
    kind: CounterKind
    data: Mapping[str, Any]
