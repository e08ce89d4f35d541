"""An asyncio event loop on virtual time, for simulations that must not depend on the machine.

Whenever every task waits for a timer, the loop jumps its clock to the next
timer instead of sleeping, so an hour of simulated traffic takes as long as
its callbacks take to run, and the figures are the same on a loaded machine
as on an idle one. Real I/O still works (ready sockets are polled without
waiting), but nothing here should rely on it: a loop with no timer and
nothing ready is stuck, and says so with ``RuntimeError`` instead of hanging.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = ["LoopClock", "VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class _AdvancingSelector(selectors.BaseSelector):
    """Polls without blocking; where the loop would block for ``timeout``, advances time."""

    def __init__(self, advance: Callable[[float], None]) -> None:
        self._inner = selectors.DefaultSelector()
        self._advance = advance

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("virtual time is stuck: no timer is scheduled and nothing is ready")
        self._advance(timeout)
        return []

    def close(self) -> None:
        self._inner.close()

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._inner.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` starts at 0.0 and moves only by jumps to timers."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_AdvancingSelector(self._advance))

    def time(self) -> float:
        return self._virtual_now

    def _advance(self, seconds: float) -> None:
        self._virtual_now += seconds


class LoopClock:
    """A ``fairgate.core.clock.Clock`` reading the running loop's time (virtual in a simulation)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def wall(self) -> float:
        return self._loop.time()

    def monotonic(self) -> float:
        return self._loop.time()


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh ``VirtualTimeLoop`` and close the loop."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
