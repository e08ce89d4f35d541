"""``X-Fairgate-Share``: how fair share admitted a request, on its answer.

    within; priority=0                  within the organisation's reservation
    borrowed; rank=2; priority=30       past it, borrowing at Fair Tree rank 2

``priority`` is the one the engine was sent (vLLM's ``X-Vllm-Priority``); with
``fairshare.send_priority: false``, to an engine without a priority scheduler
(llama-server, a generic OpenAI engine) or before any engine was tried, none is
sent and the header carries only ``within`` or ``borrowed; rank=N`` (the rank
the gateway ordered by). A request outside fair share (its model in no pool
with shares) gets no header.

The value is read from the ticket when the answer is sent, after the request
was dispatched: whatever decided the request's standing last (a queue that
re-ranks borrowers at dispatch) is what the header shows.

>>> from fairgate.proxy.ticket import Ticket
>>> share_header(Ticket(pool="p", priority=0), 0)
(b'x-fairgate-share', b'within; priority=0')
>>> share_header(Ticket(pool="p", borrowing=True, rank=2, priority=30), 30)
(b'x-fairgate-share', b'borrowed; rank=2; priority=30')
>>> share_header(Ticket(pool="p", borrowing=True, rank=2, priority=30), None)
(b'x-fairgate-share', b'borrowed; rank=2')
>>> share_header(Ticket(), None) is None
True
"""

from __future__ import annotations

from fairgate.proxy.ticket import Ticket

__all__ = ["SHARE_HEADER", "share_header"]

SHARE_HEADER = b"x-fairgate-share"


def share_header(ticket: Ticket | None, priority: int | None) -> tuple[bytes, bytes] | None:
    """The header for an answer to the request holding ``ticket``, sent to the engine
    at ``priority`` (None: no priority sent); None outside fair share."""
    if ticket is None:
        return None
    within = ticket.within_share
    if within is None:
        return None
    parts = ["within"] if within else ["borrowed", f"rank={ticket.rank}"]
    if priority is not None:
        parts.append(f"priority={priority}")
    return SHARE_HEADER, "; ".join(parts).encode("ascii")
