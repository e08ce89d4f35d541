"""All replicas by model, the gateway's in-flight count, and the routing of each request.

``pick`` runs the model's routing strategy (:mod:`fairgate.routing`: filter →
score → pick) over fresh snapshots of the model's replicas, minus those the
request already tried, and keeps the routing state between requests: the
round-robin cursor and the prefix index of each model.

    registry = ReplicaRegistry(replicas, strategies={"llama": preset("chat")})
    replica = registry.pick("llama", exclude=tried, session="conv-42", prefix=hashes,
                            within_share=ticket.within_share)

With ``fair_share`` (the default; ``routing.fair_share`` in the configuration)
every strategy ends with the ``fair-share`` filter and ``pick`` hands it how fair
share admitted the request: a within-share request goes where this gateway's
within-share requests leave a seat, a borrower where a seat is free, and
affinity chooses among those (:mod:`fairgate.routing.share`). Without it the
filter sees no request as fair share's and keeps every replica.

The breaker is asked with ``allow()`` only for the replica routing chose,
because admitting a half-open probe takes its one slot; should it refuse
(its probe went to another request since the snapshot), routing runs again
without that replica. The prefix index learns the request's prefix hashes on
the replica chosen, as the engine there will hold them once it serves it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Collection, Mapping, Sequence

from fairgate.core.replica import ReplicaSnapshot
from fairgate.routing import (
    Decision,
    PrefixIndex,
    RequestFeatures,
    RoutingState,
    Strategy,
    preset,
    route,
    with_fair_share,
)
from fairgate.upstream.replica import Replica

__all__ = ["ReplicaRegistry"]

_log = logging.getLogger(__name__)
_decisions_log = logging.getLogger("fairgate.routing")


class _ModelRouting:
    """One model's replicas, strategy and routing state (cursor, prefix index)."""

    __slots__ = ("by_name", "prefix", "replicas", "state", "strategy")

    def __init__(self, replicas: tuple[Replica, ...], strategy: Strategy, blocks: int) -> None:
        self.replicas = replicas
        self.by_name = {r.name: r for r in replicas}
        self.strategy = strategy
        self.prefix = PrefixIndex(blocks) if strategy.uses_prefix else None
        self.state = RoutingState(0, self.prefix)


class _Lease:
    """``ReplicaRegistry.lease``: acquire on entry, release on exit (a class rather than a
    generator context manager: once a request, it costs half the calls)."""

    __slots__ = ("_registry", "_replica", "_within_share")

    def __init__(
        self, registry: ReplicaRegistry, replica: Replica, within_share: bool | None
    ) -> None:
        self._registry = registry
        self._replica = replica
        self._within_share = within_share

    def __enter__(self) -> Replica:
        self._registry.acquire(self._replica, self._within_share)
        return self._replica

    def __exit__(self, *exc: object) -> None:
        self._registry.release(self._replica, self._within_share)


class ReplicaRegistry:
    """The replicas of every model: those of the configuration, given at construction,
    and those the fleet's control plane places, which join with ``add`` once their
    engine is ready and leave with ``remove`` (draining, stopped, lost).

    A ``(model, name)`` pair must be unique. ``strategies`` maps a model to its
    routing strategy (``preset("chat")`` for a model not listed); ``rng`` is
    the random source of randomised pickers and ties; ``on_decision`` is
    called with every decision ``pick`` makes (also those that found no
    replica), e.g. to count them in metrics; ``log_decisions`` writes each
    decision's rationale as one DEBUG line on the ``fairgate.routing`` logger;
    ``prefix_blocks`` bounds each replica's entry in a model's prefix index;
    ``fair_share`` turns share-aware routing on (see the module docstring).
    Methods are synchronous and meant for one event loop; ``lease`` is the way
    the proxy counts a request in flight. ``subscribe`` tells a listener of every
    ``add`` and ``remove`` (what follows a model's replicas at run time:
    ``fairgate.upstream.pool_members``).
    """

    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        strategies: Mapping[str, Strategy] | None = None,
        rng: random.Random | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        log_decisions: bool = False,
        prefix_blocks: int = 4096,
        fair_share: bool = True,
    ) -> None:
        by_model: dict[str, list[Replica]] = {}
        for replica in replicas:
            group = by_model.setdefault(replica.model, [])
            if any(other.name == replica.name for other in group):
                raise ValueError(f"duplicate replica {replica.name!r} for model {replica.model!r}")
            group.append(replica)
        self._strategies = dict(strategies or {})
        self._prefix_blocks = prefix_blocks
        self._fair_share = fair_share
        self._routing = {
            model: _ModelRouting(tuple(group), self._strategy_of(model), prefix_blocks)
            for model, group in by_model.items()
        }
        self._all = tuple(replicas)
        self._rng = rng or random.Random()
        self._on_decision = on_decision
        self._log_decisions = log_decisions
        self._listeners: list[Callable[[str], None]] = []

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(model)`` after each replica of ``model`` joins or leaves routing,
        synchronously, in the order subscribed."""
        self._listeners.append(listener)

    def _changed(self, model: str) -> None:
        for listener in self._listeners:
            listener(model)

    def _strategy_of(self, model: str) -> Strategy:
        strategy = self._strategies.get(model, preset("chat"))
        return with_fair_share(strategy) if self._fair_share else strategy

    def add(self, replica: Replica) -> None:
        """Route to ``replica`` from the next request on (a replica placed by the control
        plane whose engine is ready); the model's cursor and prefix index are kept."""
        routing = self._routing.get(replica.model)
        if routing is None:
            routing = _ModelRouting((), self._strategy_of(replica.model), self._prefix_blocks)
            self._routing[replica.model] = routing
        if replica.name in routing.by_name:
            raise ValueError(f"duplicate replica {replica.name!r} for model {replica.model!r}")
        routing.replicas = (*routing.replicas, replica)
        routing.by_name[replica.name] = replica
        self._all = (*self._all, replica)
        self._changed(replica.model)

    def remove(self, model: str, name: str) -> Replica | None:
        """Stop routing new requests to a replica (requests in flight there finish); the
        replica removed, or None when it was not routed. The prefix index forgets what it
        served: a replica that joins again under the name (a placed replica's is its
        model, node and port) is an engine started again, with an empty cache."""
        routing = self._routing.get(model)
        replica = None if routing is None else routing.by_name.pop(name, None)
        if routing is None or replica is None:
            return None
        if routing.prefix is not None:
            routing.prefix.forget(name)
        routing.replicas = tuple(r for r in routing.replicas if r is not replica)
        self._all = tuple(r for r in self._all if r is not replica)
        self._changed(model)
        return replica

    def models(self) -> Sequence[str]:
        return tuple(self._routing)

    def all(self) -> Sequence[Replica]:
        return self._all

    def replicas(self, model: str) -> Sequence[Replica]:
        """The replicas of ``model``; empty for an unknown model."""
        routing = self._routing.get(model)
        return routing.replicas if routing is not None else ()

    def snapshots(self, model: str) -> list[ReplicaSnapshot]:
        return [replica.snapshot() for replica in self.replicas(model)]

    def strategy(self, model: str) -> Strategy | None:
        """The routing strategy of ``model``; ``None`` for an unknown model."""
        routing = self._routing.get(model)
        return routing.strategy if routing is not None else None

    def uses_prefix(self, model: str) -> bool:
        """Does routing ``model`` read prefix hashes? (If not, the caller need not compute them.)"""
        routing = self._routing.get(model)
        return routing is not None and routing.prefix is not None

    def pick(
        self,
        model: str,
        exclude: Collection[str] = (),
        session: str | None = None,
        prefix: tuple[int, ...] = (),
        within_share: bool | None = None,
    ) -> Replica | None:
        """The replica for the next request of ``model``, or ``None`` if none may take it.

        ``exclude`` holds replica names already tried for this request;
        ``session`` is the key session affinity hashes (a session header or
        the key id; ``None``: no affinity); ``prefix`` the prompt's prefix
        hashes (:func:`fairgate.routing.prefix_hashes`); ``within_share`` how fair
        share admitted the request (``Ticket.within_share``: True, False, or None
        outside fair share), read only with ``fair_share`` on.
        """
        routing = self._routing.get(model)
        if routing is None:
            return None
        replicas = routing.replicas
        if exclude:
            replicas = tuple(r for r in replicas if r.name not in exclude)
        snapshots = list(map(Replica.snapshot, replicas))
        features = RequestFeatures(
            model, session, prefix, within_share if self._fair_share else None
        )
        while True:
            decision = route(routing.strategy, snapshots, features, self._rng, routing.state)
            if decision.cursor != routing.state.cursor:
                routing.state = RoutingState(decision.cursor, routing.prefix)
            chosen = None if decision.replica is None else routing.by_name[decision.replica]
            if chosen is None or chosen.breaker.allow():
                break
            # Its half-open probe went to another request since the snapshot: route
            # again among the others (the decision that named it is not reported).
            snapshots = [s for s in snapshots if s.name != chosen.name]
        if chosen is not None and prefix and routing.prefix is not None:
            routing.prefix.record(chosen.name, prefix)
        if self._on_decision is not None:
            self._on_decision(decision)
        if self._log_decisions and _decisions_log.isEnabledFor(logging.DEBUG):
            _decisions_log.debug("%s", decision.log_line())
        return chosen

    def acquire(self, replica: Replica, within_share: bool | None = None) -> None:
        replica.in_flight += 1
        if within_share is not None:
            if within_share:
                replica.within_share += 1
            else:
                replica.borrowing += 1

    def release(self, replica: Replica, within_share: bool | None = None) -> None:
        if replica.in_flight <= 0:
            _log.error("in-flight count of %r released below zero", replica)
            return
        replica.in_flight -= 1
        if within_share is not None:
            if within_share:
                replica.within_share = max(0, replica.within_share - 1)
            else:
                replica.borrowing = max(0, replica.borrowing - 1)

    def lease(self, replica: Replica, within_share: bool | None = None) -> _Lease:
        """Count one request in flight on ``replica`` for the duration of the block.

        ``within_share`` says how fair share admitted it (True: within its
        organisation's reservation, False: borrowing; None: no fair share), so
        the replica's ``within_share``/``borrowing`` counts follow."""
        return _Lease(self, replica, within_share)

    def ready(self) -> dict[str, bool]:
        """Per model: is at least one replica healthy with a breaker that admits requests?"""
        return {
            model: any(r.healthy and not r.breaker.blocked() for r in routing.replicas)
            for model, routing in self._routing.items()
        }
