"""The label children one settled request writes, looked up together.

A request settled on the full path counts itself, its duration, its first-token time
and its prompt and completion tokens: five label children of four families, each
found by its own lookup (``GatewayMetrics.child``: a call and a dict read apiece, ~12
Python calls a request). Every one of them is fixed by the request's (model, route,
status), so ``SettledMetrics`` holds them all for one such label set and the settle
stage does one lookup (``GatewayMetrics.settled``).

A child that a request of the label set may never write (the first-token time of a
refused request, cached tokens) stands as a ``_FirstUse`` until it is written: a child,
once made, is exposed at zero by ``/metrics``, so making them all up front would show
series the gateway never counted. The first write makes the real child (through
``GatewayMetrics.child``, so every caller shares one) and puts it in the placeholder's
slot; later writes go straight to the child.

``GatewayMetrics`` builds them; what they read of it is the ``Families`` protocol
(which it meets), so this module imports nothing of ``observability.metrics``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fairgate.observability.loop_metrics import LoopCounter, LoopHistogram

__all__ = ["Families", "SettledMetrics"]


class Families(Protocol):
    """The families a settled request writes and the cached child lookup
    (``GatewayMetrics`` meets it)."""

    requests: LoopCounter
    duration: LoopHistogram
    ttft: LoopHistogram
    tokens: LoopCounter
    usage_estimated: LoopCounter

    def child(self, family: Any, *labels: str) -> Any: ...


class _FirstUse:
    """Stands for a label child not made yet; the first ``inc`` or ``observe`` makes it
    (``make``) and hands it to ``put``, which replaces this placeholder."""

    __slots__ = ("_make", "_put")

    def __init__(self, make: Callable[[], Any], put: Callable[[Any], None]) -> None:
        self._make = make
        self._put = put

    def _child(self) -> Any:
        child = self._make()
        self._put(child)
        return child

    def inc(self, amount: float = 1) -> None:
        self._child().inc(amount)

    def observe(self, amount: float) -> None:
        self._child().observe(amount)


class SettledMetrics:
    """The children a settled request of one (model, route, status) writes:
    ``requests`` (``fairgate_requests``), ``duration``, ``ttft``, ``prompt_tokens``,
    ``completion_tokens``, ``cached_tokens`` (``fairgate_tokens`` by kind) and
    ``estimated`` (``fairgate_usage_estimated``), each ``metrics.child`` of its family;
    all but the first two are made on their first write."""

    __slots__ = (
        "cached_tokens",
        "completion_tokens",
        "duration",
        "estimated",
        "prompt_tokens",
        "requests",
        "ttft",
    )

    def __init__(
        self,
        metrics: Families,
        model: str,
        route: str,
        status: str,
    ) -> None:
        m, child = metrics, metrics.child
        # every settled request writes these two: made now, in the order the settle
        # stage always wrote them (a family's series are exposed in the order made)
        self.requests: Any = child(m.requests, model, route, status)
        self.duration: Any = child(m.duration, model, route)
        self.ttft: Any = self._later("ttft", lambda: child(m.ttft, model))
        self.prompt_tokens: Any = self._later(
            "prompt_tokens", lambda: child(m.tokens, model, "prompt")
        )
        self.completion_tokens: Any = self._later(
            "completion_tokens", lambda: child(m.tokens, model, "completion")
        )
        self.cached_tokens: Any = self._later(
            "cached_tokens", lambda: child(m.tokens, model, "cached")
        )
        self.estimated: Any = self._later("estimated", lambda: child(m.usage_estimated, model))

    def _later(self, slot: str, make: Callable[[], Any]) -> _FirstUse:
        return _FirstUse(make, lambda made: setattr(self, slot, made))
