"""Hypothesis strategies and builders for replica snapshots, shared by the routing tests."""

from __future__ import annotations

from hypothesis import strategies as st

from fairgate.core.replica import ReplicaSnapshot

MODEL = "llama"

metric = st.one_of(st.none(), st.floats(min_value=0, max_value=500, allow_nan=False))
fraction = st.one_of(st.none(), st.floats(min_value=0, max_value=1))

snapshot = st.builds(
    ReplicaSnapshot,
    name=st.text(alphabet="abcdefgh0123456789", min_size=1, max_size=6),
    model=st.sampled_from([MODEL, MODEL, "other"]),
    weight=st.integers(min_value=0, max_value=5),
    healthy=st.booleans(),
    breaker_open=st.booleans(),
    in_flight=st.integers(min_value=0, max_value=200),
    running=metric,
    waiting=metric,
    kv_usage=fraction,
)

replica_lists = st.lists(snapshot, max_size=12, unique_by=lambda r: r.name)


def replica(name: str, **fields: object) -> ReplicaSnapshot:
    """A healthy replica of MODEL with the given metrics."""
    return ReplicaSnapshot(name=name, model=MODEL, **fields)  # type: ignore[arg-type]
