"""A node's health state from how long its agent has been silent and whether its
engines still answer — pure, so the rules are tested without a clock or a network.

    healthy      the agent was heard within `unreachable_after`
    unreachable  silent longer: no new replica goes there, but its engines stay in
                 routing while they pass the gateway's own health checks (the control
                 plane not hearing an agent is not an engine being down)
    lost         silent longer than `lost_after` AND fenced: none of its engines answers
                 the gateway's health checks any more. Only then are its replicas taken
                 out of routing and placed elsewhere, so every agent going quiet at once
                 (a control-plane network fault) tears nothing down while engines serve.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["NodeState", "node_state"]

NodeState = Literal["healthy", "unreachable", "lost"]


def node_state(
    silent: float,
    *,
    unreachable_after: float,
    lost_after: float,
    engines_answer: bool,
) -> NodeState:
    """The state of a node whose agent was last heard `silent` seconds ago.

    `engines_answer`: at least one of its replicas passes the data-plane health check."""
    if silent < unreachable_after:
        return "healthy"
    if silent < lost_after or engines_answer:
        return "unreachable"
    return "lost"
