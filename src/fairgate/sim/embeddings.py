"""``/v1/embeddings``: deterministic unit vectors, as floats or base64 little-endian float32.

The vector of an input is a function of its token ids and the seed only
(SHAKE-256 bytes mapped to [-1, 1] and normalized), so equal inputs embed
equally across processes. The official SDK asks for ``base64`` by default.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from fairgate.core.errors import BadRequest
from fairgate.sim.output import new_id, now_seconds

__all__ = ["embedding", "embeddings_body"]


def embedding(token_ids: Sequence[int], dim: int, seed: int) -> list[float]:
    """A unit vector of ``dim`` floats for ``token_ids``."""
    data = struct.pack(f"<q{len(token_ids)}I", seed, *token_ids)
    raw = hashlib.shake_256(data).digest(2 * dim)
    values = [v / 32768.0 for v in struct.unpack(f"<{dim}h", raw)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def embeddings_body(
    body: Mapping[str, Any], model: str, inputs: Sequence[Sequence[int]], dim: int, seed: int
) -> bytes:
    """The response body for ``inputs``; ``BadRequest`` on an unknown encoding or size."""
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise BadRequest("encoding_format must be 'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None:
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise BadRequest("dimensions must be a positive integer")
        dim = min(dim, dimensions)
    data = []
    for index, ids in enumerate(inputs):
        vector = embedding(ids, dim, seed)
        value: list[float] | str = vector
        if encoding == "base64":
            value = base64.b64encode(struct.pack(f"<{dim}f", *vector)).decode("ascii")
        data.append({"index": index, "object": "embedding", "embedding": value})
    tokens = sum(len(ids) for ids in inputs)
    return orjson.dumps(
        {
            "id": new_id("embd-"),
            "object": "list",
            "created": now_seconds(),
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
        }
    )
