"""One request as the simulated engine sees it: prompt ids, a priority, and progress."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["SeqState", "Sequence"]


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


def _nothing() -> None:
    return None


@dataclass(eq=False, slots=True)
class Sequence:
    """A generation request inside the scheduler.

    ``priority`` (lower runs first) and ``arrival`` (monotonic seconds) order the
    waiting heap and pick preemption victims. ``generated`` counts tokens already
    produced for the client and never goes back, even across a preemption;
    ``computed`` counts tokens whose KV is in ``blocks`` and drops to zero when the
    sequence is preempted (vLLM's recompute). ``cached_tokens`` is the prefix-cache
    hit of the first admission (``-1`` until then), the figure usage reports.
    ``notify`` is called after every change a client can observe (a token, the end).
    """

    request_id: str
    priority: int
    arrival: float
    prompt: list[int]
    max_tokens: int
    root: bytes
    output_id: Callable[[int], int]
    notify: Callable[[], None] = _nothing
    order: int = 0
    state: SeqState = SeqState.WAITING
    generated: int = 0
    computed: int = 0
    registered: int = 0
    blocks: list[int] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    cached_tokens: int = -1
    preemptions: int = 0
    ready_at: float = math.inf
    admitted_at: float | None = None

    @property
    def total_tokens(self) -> int:
        """Prompt plus every token generated so far."""
        return len(self.prompt) + self.generated

    @property
    def done(self) -> bool:
        return self.state in (SeqState.FINISHED, SeqState.ABORTED)

    def tokens(self, start: int, end: int) -> list[int]:
        """Token ids at positions ``start`` up to ``end`` (prompt, then output)."""
        n = len(self.prompt)
        head = self.prompt[start:end] if start < n else []
        tail = [self.output_id(i - n) for i in range(max(start, n), end)]
        return head + tail
