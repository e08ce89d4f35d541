"""The test process as a measuring client: no collector pass while it measures.

A test that times what a gateway process does from inside the pytest process (stream
gaps, probe latencies) also times its own pauses: late in a whole run the pytest
process holds hundreds of megabytes of objects, and one full collection stalls every
client thread at once for a tenth of a second or more — eight streams' gaps inflated
together are the top percent of a few hundred gaps, so the p99 then measures the
collector, not the gateway. Inside ``steady_client()`` the objects already alive are
frozen (no collection walks them) and the collector is off; both are restored after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["steady_client"]


@contextmanager
def steady_client() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.unfreeze()
