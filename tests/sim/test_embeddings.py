"""Embedding vectors: deterministic, unit length, float or base64."""

from __future__ import annotations

import base64
import math
import struct

import orjson
import pytest

from fairgate.core.errors import BadRequest
from fairgate.sim.embeddings import embedding, embeddings_body


def test_vectors_are_unit_length_and_a_function_of_ids_and_seed() -> None:
    v = embedding([1, 2, 3], 64, seed=0)
    assert len(v) == 64 and math.isclose(math.fsum(x * x for x in v), 1.0)
    assert embedding([1, 2, 3], 64, seed=0) == v
    assert embedding([1, 2, 4], 64, seed=0) != v
    assert embedding([1, 2, 3], 64, seed=1) != v


def test_base64_decodes_to_the_float_vector() -> None:
    plain = orjson.loads(embeddings_body({}, "m", [[5, 6]], 8, 0))
    packed = orjson.loads(embeddings_body({"encoding_format": "base64"}, "m", [[5, 6]], 8, 0))
    floats = struct.unpack("<8f", base64.b64decode(packed["data"][0]["embedding"]))
    assert all(
        math.isclose(a, b, rel_tol=1e-6)
        for a, b in zip(floats, plain["data"][0]["embedding"], strict=True)
    )
    assert plain["usage"] == {"prompt_tokens": 2, "total_tokens": 2, "completion_tokens": 0}


def test_dimensions_shorten_and_bad_options_are_refused() -> None:
    body = orjson.loads(embeddings_body({"dimensions": 4}, "m", [[1]], 8, 0))
    assert len(body["data"][0]["embedding"]) == 4
    for bad in ({"encoding_format": "int8"}, {"dimensions": 0}):
        with pytest.raises(BadRequest):
            embeddings_body(bad, "m", [[1]], 8, 0)
