"""Inter-token gaps of streams through the gateway, as a client sees them.

gaps = stream_gaps(url, key, model="m", streams=6, tokens=60)
p99(gaps)   # seconds between consecutive content events, every stream pooled
"""

from __future__ import annotations

import itertools
import math
import threading
import time

import httpx
import orjson
from tests.steady_client import steady_client


def stream_gaps(url: str, key: str, *, model: str, streams: int, tokens: int) -> list[float]:
    """Run ``streams`` concurrent chat streams of ``tokens`` tokens and return every gap
    between two consecutive content events (the first token's wait is not a gap).

    Raises ``AssertionError`` when a stream does not answer 200 or delivers fewer tokens.
    """
    results: list[list[float]] = [[] for _ in range(streams)]
    errors: list[str] = []

    def one(index: int) -> None:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"stream {index}"}],
            "max_tokens": tokens,
            "stream": True,
        }
        arrivals: list[float] = []
        headers = {"authorization": f"Bearer {key}"}
        try:
            with (
                httpx.Client(timeout=60) as client,
                client.stream(
                    "POST", url + "/v1/chat/completions", json=body, headers=headers
                ) as r,
            ):
                if r.status_code != 200:
                    errors.append(f"stream {index}: {r.status_code} {r.read()[:200]!r}")
                    return
                for line in r.iter_lines():
                    if _has_content(line):
                        arrivals.append(time.perf_counter())
        except httpx.HTTPError as exc:
            errors.append(f"stream {index}: {exc!r}")
            return
        if len(arrivals) < tokens:
            errors.append(f"stream {index}: {len(arrivals)} of {tokens} tokens")
        results[index] = [b - a for a, b in itertools.pairwise(arrivals)]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    with steady_client():  # the gaps are the gateway's, not this process's collector's
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors, errors
    return [gap for gaps in results for gap in gaps]


def _has_content(line: str) -> bool:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return False
    event = orjson.loads(line[6:])
    return any(choice.get("delta", {}).get("content") for choice in event.get("choices", []))


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
