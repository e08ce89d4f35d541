"""A discrete-event simulation of the fair-share policy in front of one vLLM engine.

Closed-loop clients per organisation send one request at a time and send the
next as soon as the previous finishes. For every request the gateway side asks
:class:`~fairgate.fairshare.FairShare` for a priority, counting within-share
requests in flight and charging decayed usage when a request finishes, exactly
as the gateway does; the engine side is :class:`EngineModel` (vLLM's priority
scheduler). No event loop and no clock: time is the engine's step number.

The engine has ``C × blocks(longest request)`` KV blocks: C is the concurrency
the pool sustains without preemption even if every request is as long as it
can be, so the within-share requests (never more than C in all) always fit.

    python -m fairgate.fairshare.simulation        # prints the figures of docs/fairshare.md
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from fairgate.fairshare.engine_model import EngineModel, SimRequest
from fairgate.fairshare.policy import FairShare
from fairgate.fairshare.priority import PriorityClass

__all__ = [
    "SCENARIOS",
    "OrgLoad",
    "OrgReport",
    "Report",
    "Scenario",
    "format_report",
    "main",
    "run",
]


@dataclass(frozen=True, slots=True)
class OrgLoad:
    """An organisation's share and its ``clients`` closed-loop clients, from step ``start`` on."""

    name: str
    share: float
    clients: int
    start: int = 0
    cls: PriorityClass = PriorityClass.INTERACTIVE


@dataclass(frozen=True, slots=True)
class Scenario:
    """One run. Token counts are drawn uniformly from the inclusive ranges; times are in steps.

    ``measure_from`` is the first step counted in the running fractions and KV
    utilisation. ``gateway_priorities=False`` is the control run (every request
    at priority 0, as without the gateway); ``count_all_in_flight=True`` tests
    the reservation against all requests in flight instead of the within-share
    ones (the rule this policy rejects). ``half_life`` is in steps: it must be
    long against a request's life (here about 150 steps), as 168 h is against
    seconds.
    """

    name: str
    orgs: tuple[OrgLoad, ...]
    capacity: int = 16
    steps: int = 20_000
    measure_from: int = 8_000
    half_life: float = 2_000.0
    gateway_priorities: bool = True
    count_all_in_flight: bool = False
    prompt_tokens: tuple[int, int] = (32, 512)
    output_tokens: tuple[int, int] = (16, 256)
    block_tokens: int = 16
    input_cost: float = 0.1
    output_cost: float = 1.0
    seed: int = 1


@dataclass(frozen=True, slots=True)
class OrgReport:
    """What one organisation got over the measured steps.

    ``running_fraction`` is its part of all running request-steps;
    ``mean_running`` and ``mean_running_within_share`` count its running
    requests per step; ``max_within_share`` is the most within-share requests
    it ever had in flight (the whole run); waits are queueing delays in steps
    of the requests that finished in the measured steps.
    """

    name: str
    reservation: int
    running_fraction: float
    mean_running: float
    mean_running_within_share: float
    max_within_share: int
    completed: int
    wait_within_share: float
    max_wait_within_share: int
    wait_borrowing: float


@dataclass(frozen=True, slots=True)
class Report:
    """The figures of one scenario; preemptions are counted over the whole run."""

    scenario: str
    kv_utilisation: float
    mean_running: float
    preempted_within_share: int
    preempted_borrowing: int
    orgs: Mapping[str, OrgReport]


@dataclass(slots=True)
class _Tally:
    running_steps: int = 0
    within_steps: int = 0
    completed: int = 0
    in_flight: int = 0
    within: int = 0
    max_within: int = 0
    waits: dict[bool, list[int]] = field(default_factory=lambda: {True: [], False: []})


class _Run:
    def __init__(self, scenario: Scenario) -> None:
        self.s = scenario
        self.rng = random.Random(scenario.seed)
        longest = scenario.prompt_tokens[1] + scenario.output_tokens[1]
        blocks = -(-longest // scenario.block_tokens)
        self.engine = EngineModel(scenario.capacity * blocks, scenario.block_tokens)
        shares = {org.name: org.share for org in scenario.orgs}
        self.policy = FairShare({"pool": scenario.capacity}, {"pool": shares}, scenario.half_life)
        self.usage = {org.name: self.policy.usage() for org in scenario.orgs}
        self.tally = {org.name: _Tally() for org in scenario.orgs}
        self.seq = 0
        self.preempted = {True: 0, False: 0}
        self.kv_used = 0
        self.measured = 0

    def submit(self, org: OrgLoad, client: int, now: int) -> None:
        tally = self.tally[org.name]
        tally.in_flight += 1
        if self.s.gateway_priorities:
            usage_now = {name: u.value_at(now) for name, u in self.usage.items()}
            counted = tally.in_flight - 1 if self.s.count_all_in_flight else tally.within
            decision = self.policy.decide("pool", org.name, org.cls, counted, usage_now)
            priority, within = decision.priority, decision.within_share
        else:
            priority, within = 0, False
        if within:
            tally.within += 1
            tally.max_within = max(tally.max_within, tally.within)
        self.seq += 1
        prompt = self.rng.randint(*self.s.prompt_tokens)
        output = self.rng.randint(*self.s.output_tokens)
        self.engine.submit(
            SimRequest(org.name, client, prompt, output, priority, now, self.seq, within)
        )

    def finish(self, request: SimRequest, now: int) -> None:
        tally = self.tally[request.org]
        tally.in_flight -= 1
        if request.within_share:
            tally.within -= 1
        cost = request.prompt * self.s.input_cost + request.output * self.s.output_cost
        self.usage[request.org] = self.usage[request.org].charged(cost, now)
        if now >= self.s.measure_from:
            tally.completed += 1
            admitted = request.arrival if request.admitted_at is None else request.admitted_at
            tally.waits[request.within_share].append(admitted - request.arrival)

    def execute(self) -> Report:
        by_start: dict[int, list[OrgLoad]] = {}
        for org in self.s.orgs:
            by_start.setdefault(org.start, []).append(org)
        orgs = {org.name: org for org in self.s.orgs}
        for now in range(self.s.steps):
            for org in by_start.get(now, ()):
                for client in range(org.clients):
                    self.submit(org, client, now)
            finished, preempted = self.engine.step(now)
            for request in preempted:
                self.preempted[request.within_share] += 1
            for request in finished:
                self.finish(request, now)
                self.submit(orgs[request.org], request.client, now + 1)
            if now >= self.s.measure_from:
                self.measure()
        return self.report()

    def measure(self) -> None:
        self.measured += 1
        self.kv_used += self.engine.total_blocks - self.engine.free_blocks
        for request in self.engine.running:
            tally = self.tally[request.org]
            tally.running_steps += 1
            tally.within_steps += request.within_share

    def report(self) -> Report:
        steps = max(1, self.measured)
        total = max(1, sum(t.running_steps for t in self.tally.values()))
        reservations = self.policy.reservations("pool")
        orgs = {
            name: OrgReport(
                name=name,
                reservation=reservations.get(name, 0),
                running_fraction=t.running_steps / total,
                mean_running=t.running_steps / steps,
                mean_running_within_share=t.within_steps / steps,
                max_within_share=t.max_within,
                completed=t.completed,
                wait_within_share=_mean(t.waits[True]),
                max_wait_within_share=max(t.waits[True], default=0),
                wait_borrowing=_mean(t.waits[False]),
            )
            for name, t in self.tally.items()
        }
        return Report(
            scenario=self.s.name,
            kv_utilisation=self.kv_used / (steps * self.engine.total_blocks),
            mean_running=sum(t.running_steps for t in self.tally.values()) / steps,
            preempted_within_share=self.preempted[True],
            preempted_borrowing=self.preempted[False],
            orgs=orgs,
        )


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def run(scenario: Scenario) -> Report:
    """Simulate ``scenario``; deterministic for a given seed."""
    return _Run(scenario).execute()


_A = OrgLoad("A", 0.8125, clients=64)
_B = OrgLoad("B", 0.1875, clients=64)
_B_LATE = OrgLoad("B", 0.1875, clients=64, start=2_000)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("A alone", (_A,), steps=10_000, measure_from=2_000),
    Scenario("B alone", (_B,), steps=10_000, measure_from=2_000),
    Scenario("both saturating, B after A", (_A, _B_LATE)),
    Scenario("control: every request at priority 0", (_A, _B_LATE), gateway_priorities=False),
    Scenario("rejected rule: all in flight counted", (_A, _B_LATE), count_all_in_flight=True),
    Scenario("C = 10", (_A, _B_LATE), capacity=10),
)
"""The scenarios of docs/fairshare.md: C = 16 (reservations 13 / 3) unless stated otherwise."""


def format_report(report: Report) -> str:
    """The scenario's totals on one line, then one line per organisation."""
    lines = [
        f"{report.scenario}: KV utilisation {report.kv_utilisation:.3f}, "
        f"{report.mean_running:.1f} running, preempted {report.preempted_within_share} "
        f"within share / {report.preempted_borrowing} borrowing"
    ]
    for o in report.orgs.values():
        lines.append(
            f"  {o.name}: reservation {o.reservation:2d} | running fraction "
            f"{o.running_fraction:.3f} | running {o.mean_running:4.1f} "
            f"(within share {o.mean_running_within_share:4.1f}, max {o.max_within_share:2d}) | "
            f"wait within share {o.wait_within_share:3.1f} (max {o.max_wait_within_share}), "
            f"borrowing {o.wait_borrowing:6.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    """Run every scenario and print its figures."""
    for scenario in SCENARIOS:
        print(format_report(run(scenario)))


if __name__ == "__main__":
    main()
