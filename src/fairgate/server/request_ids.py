"""Request ids: unique in a process and across processes, cheap to make.

    next_id = request_ids()
    next_id()   # '3f9a0c1d2e4b0000000001': a random prefix of the process, then a count

Every answer the gateway writes carries one (``x-request-id``), and its log lines name
it, so a caller's report can be matched to the server's record.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

__all__ = ["request_ids"]


def request_ids() -> Callable[[], str]:
    """A maker of ids: 12 hex digits of randomness, then a 10-digit hex counter."""
    prefix = os.urandom(6).hex()
    counter = itertools.count(1)

    def next_id() -> str:
        return f"{prefix}{next(counter):010x}"

    return next_id
