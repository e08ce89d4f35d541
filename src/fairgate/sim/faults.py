"""Fault injection: what the next requests should suffer, armed by flags or ``POST /sim/faults``.

Every fault is counted. ``fail_next`` is a number of requests. A stall or a close
is armed for ``times`` requests (``-1``: every request until disarmed); flags at
start-up arm them for every request. Each inference request takes its plan when
it arrives, so the order of arrival decides who suffers what:

- ``fail_next`` / ``fail_status``: answer with that status and an error body;
- ``stall_before_headers``: wait before the status line;
- ``stall_before_first_token``: send the headers, then wait before the first token;
- ``stall_mid_stream`` after ``stall_mid_stream_after`` tokens (streams only);
- ``close_mid_stream`` after K tokens: drop the connection (streams only);
- ``metrics_delay``: every ``/metrics`` answer waits that long (until changed).

A request that fails takes no other fault; mid-stream faults are left for the
next streaming request when a non-streaming one arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fairgate.core.errors import BadRequest
from fairgate.sim.config import FaultSettings

__all__ = ["FaultPlan", "Faults"]

_FOREVER = -1


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What one request suffers; all zero/None is a healthy request."""

    fail_status: int | None = None
    stall_before_headers: float = 0.0
    stall_before_first_token: float = 0.0
    stall_mid_stream: float = 0.0
    stall_mid_stream_after: int = 0
    close_mid_stream: int | None = None


_HEALTHY = FaultPlan()


@dataclass(slots=True)
class _Armed:
    value: float = 0.0
    remaining: int = 0

    def take(self) -> float:
        if self.remaining == 0:
            return 0.0
        if self.remaining > 0:
            self.remaining -= 1
        return self.value


class Faults:
    """The armed faults. ``take`` is O(1) and allocation-free when nothing is armed."""

    def __init__(self, initial: FaultSettings | None = None) -> None:
        self._initial = initial or FaultSettings()
        self.reset()

    def reset(self) -> None:
        """Back to the faults armed at start-up."""
        s = self._initial
        self.fail_next = s.fail_next
        self.fail_status = s.fail_status
        self.metrics_delay = s.metrics_delay
        self.stall_mid_stream_after = s.stall_mid_stream_after
        self._headers = _Armed(s.stall_before_headers, _FOREVER if s.stall_before_headers else 0)
        self._first = _Armed(
            s.stall_before_first_token, _FOREVER if s.stall_before_first_token else 0
        )
        self._mid = _Armed(s.stall_mid_stream, _FOREVER if s.stall_mid_stream else 0)
        close = s.close_mid_stream
        self._close = _Armed(float(close or 0), _FOREVER if close is not None else 0)

    @property
    def armed(self) -> bool:
        return bool(
            self.fail_next
            or self._headers.remaining
            or self._first.remaining
            or self._mid.remaining
            or self._close.remaining
        )

    def take(self, *, streaming: bool) -> FaultPlan:
        """The plan for the request arriving now; counts are spent as taken."""
        if not self.armed:
            return _HEALTHY
        if self.fail_next:
            self.fail_next -= 1
            return FaultPlan(fail_status=self.fail_status)
        mid = close = None
        if streaming:
            mid = self._mid.take()
            if self._close.remaining:
                close = int(self._close.take())
        return FaultPlan(
            stall_before_headers=self._headers.take(),
            stall_before_first_token=self._first.take(),
            stall_mid_stream=mid or 0.0,
            stall_mid_stream_after=self.stall_mid_stream_after,
            close_mid_stream=close,
        )

    def arm(self, spec: Mapping[str, Any]) -> None:
        """Apply a ``POST /sim/faults`` body; keys not named keep their state.

        ``BadRequest`` on an unknown key or a value of the wrong type or range;
        nothing is changed then.
        """
        unknown = set(spec) - _KEYS
        if unknown:
            raise BadRequest(f"unknown fault keys: {', '.join(sorted(unknown))}")
        times = _int(spec, "times", 1, minimum=_FOREVER)
        fail_next = _int(spec, "fail_next", self.fail_next)
        fail_status = _int(spec, "fail_status", self.fail_status, minimum=400)
        if fail_status > 599:
            raise BadRequest("fail_status must be in 400..599")
        after = _int(spec, "stall_mid_stream_after", self.stall_mid_stream_after)
        stalls = {k: _seconds(spec, k) for k in _STALLS if k in spec}
        close = (
            _int(spec, "close_mid_stream", 0) if spec.get("close_mid_stream") is not None else None
        )
        metrics_delay = _seconds(spec, "metrics_delay") if "metrics_delay" in spec else None
        self.fail_next, self.fail_status, self.stall_mid_stream_after = (
            fail_next,
            fail_status,
            after,
        )
        for key, seconds in stalls.items():
            setattr(self, _STALLS[key], _Armed(seconds, times if seconds else 0))
        if "close_mid_stream" in spec:
            self._close = _Armed(float(close or 0), times if close is not None else 0)
        if metrics_delay is not None:
            self.metrics_delay = metrics_delay

    def to_json(self) -> dict[str, Any]:
        return {
            "fail_next": self.fail_next,
            "fail_status": self.fail_status,
            "stall_before_headers": _state(self._headers),
            "stall_before_first_token": _state(self._first),
            "stall_mid_stream": _state(self._mid),
            "stall_mid_stream_after": self.stall_mid_stream_after,
            "close_mid_stream": {
                "after": int(self._close.value) if self._close.remaining else None,
                "remaining": self._close.remaining,
            },
            "metrics_delay": self.metrics_delay,
        }


_STALLS = {
    "stall_before_headers": "_headers",
    "stall_before_first_token": "_first",
    "stall_mid_stream": "_mid",
}
_KEYS = {
    *_STALLS,
    "fail_next",
    "fail_status",
    "stall_mid_stream_after",
    "close_mid_stream",
    "metrics_delay",
    "times",
}


def _state(armed: _Armed) -> dict[str, float | int]:
    return {"seconds": armed.value if armed.remaining else 0.0, "remaining": armed.remaining}


def _int(spec: Mapping[str, Any], key: str, default: int, *, minimum: int = 0) -> int:
    value = spec.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"{key} must be an integer >= {minimum}")
    return value


def _seconds(spec: Mapping[str, Any], key: str) -> float:
    value = spec.get(key)
    if value is None:
        return 0.0
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise BadRequest(f"{key} must be a number of seconds >= 0")
    return float(value)
