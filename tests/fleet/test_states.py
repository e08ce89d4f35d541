"""A node's state from its agent's silence and its engines' health."""

from __future__ import annotations

import pytest

from fairgate.fleet.states import node_state

TIMES = {"unreachable_after": 15.0, "lost_after": 120.0}


@pytest.mark.parametrize(
    ("silent", "answer", "state"),
    [
        (0.0, False, "healthy"),
        (14.9, False, "healthy"),
        (15.0, True, "unreachable"),
        (15.0, False, "unreachable"),
        (119.0, False, "unreachable"),
        (120.0, False, "lost"),
        (3600.0, False, "lost"),
    ],
)
def test_silence_makes_a_node_unreachable_then_lost(
    silent: float, answer: bool, state: str
) -> None:
    assert node_state(silent, engines_answer=answer, **TIMES) == state


def test_a_silent_node_whose_engines_answer_is_never_lost() -> None:
    # Every agent quiet at once (the control plane's network, not the nodes): nothing is
    # torn down while the engines still pass the gateway's health checks.
    for silent in (120.0, 600.0, 86400.0):
        assert node_state(silent, engines_answer=True, **TIMES) == "unreachable"
