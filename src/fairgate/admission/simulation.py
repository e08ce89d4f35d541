"""An in-process simulation: two bands of closed-loop clients, admission on or off, a toy engine.

The engine runs ``slots`` requests at once and queues the rest first in, first
out (no priority scheduler, like llama-server or vLLM without
``--scheduling-policy priority``); a request holds a slot for a service time
drawn uniformly from ``service``. Its ``running`` and ``waiting`` counts are
scraped once a second, so they lag as real metrics do; the gateway's
in-flight count is live. The gateway side is the real ``AdmissionController``
with a ``SaturationDetector`` and a ``CapacityTracker`` over that replica.

``low_clients`` closed-loop clients (bronze, spread over ``low_keys`` keys)
send one request after another; ``high_clients`` clients (platinum, or the
band named by ``high_band``) think for a while between requests and record
their latency. Everything runs on virtual time (``VirtualTimeLoop``), so the
figures are exact and do not depend on the machine.

    .venv/bin/python -m fairgate.admission.simulation    # prints the figures of docs/admission.md
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field

from fairgate.admission.bands import Bands
from fairgate.admission.capacity import CapacityTracker
from fairgate.admission.controller import AdmissionController
from fairgate.admission.detector import SaturationDetector
from fairgate.admission.virtual_loop import LoopClock, run_virtual
from fairgate.core.errors import GatewayError
from fairgate.core.replica import ReplicaSnapshot

__all__ = ["SCENARIOS", "Report", "Scenario", "ToyEngine", "format_report", "main", "run"]

BANDS = (("platinum", 1.5), ("gold", 1.0), ("bronze", 0.8))
_SCRAPE_INTERVAL = 1.0
_RETRY_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class Scenario:
    """One run; times in (virtual) seconds. Latencies count from ``warmup`` to ``duration``."""

    name: str
    admission: bool = True
    low_clients: int = 500
    low_keys: int = 50
    high_clients: int = 4
    high_band: str = "platinum"
    slots: int = 32
    service: tuple[float, float] = (0.5, 1.5)
    think: tuple[float, float] = (0.5, 2.0)
    duration: float = 300.0
    warmup: float = 30.0
    queue_size: int = 1000
    queue_ttl: float = 60.0
    seed: int = 7


@dataclass(slots=True)
class Report:
    """What one run measured: high-band latencies (s), low-band completions and refusals."""

    scenario: str
    high_latencies: list[float] = field(default_factory=list)
    low_completed: int = 0
    low_refused: int = 0
    low_waits: list[float] = field(default_factory=list)
    learned_capacity: float = 0.0
    measured_for: float = 0.0

    def high_percentile(self, q: float) -> float:
        """The nearest-rank ``q`` percentile (0 < q <= 100) of the high-band latencies."""
        ordered = sorted(self.high_latencies)
        if not ordered:
            return 0.0
        rank = max(1, -(-len(ordered) * q // 100))
        return ordered[int(rank) - 1]

    @property
    def low_throughput(self) -> float:
        return self.low_completed / self.measured_for if self.measured_for else 0.0


class ToyEngine:
    """``slots`` requests at once, the rest wait first in, first out."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.running = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def serve(self, seconds: float) -> None:
        if self.running < self.slots and not self._waiting:
            self.running += 1
        else:
            slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append(slot)
            await slot  # the finishing request hands its slot over
        try:
            await asyncio.sleep(seconds)
        finally:
            if self._waiting:
                self._waiting.popleft().set_result(None)
            else:
                self.running -= 1


class _Run:
    def __init__(self, s: Scenario) -> None:
        self.s = s
        self.loop = asyncio.get_running_loop()
        self.engine = ToyEngine(s.slots)
        self.in_flight = 0
        self.scraped = (0, 0)
        clock = LoopClock(self.loop)
        self.tracker = CapacityTracker(initial=s.slots)
        detector = SaturationDetector(self._snapshots, self.tracker, clock)
        self.controller = AdmissionController(
            "toy",
            Bands(BANDS),
            queue_size=s.queue_size,
            queue_ttl=s.queue_ttl,
            clock=clock,
            saturation_fn=detector,
        )
        self.report = Report(s.name, measured_for=s.duration - s.warmup)

    def _snapshots(self) -> list[ReplicaSnapshot]:
        running, waiting = self.scraped
        return [ReplicaSnapshot("toy-1", "toy", in_flight=self.in_flight, running=running,
                                waiting=waiting)]  # fmt: skip

    def measuring(self) -> bool:
        return self.loop.time() >= self.s.warmup

    async def request(self, band: str, key: str, seconds: float) -> float:
        """Latency of one request through the gateway (admission, then the engine)."""
        start = self.loop.time()
        lease = None
        if self.s.admission:
            lease = await self.controller.admit(band=band, tenant=key)
            if band == "bronze" and self.measuring():
                self.report.low_waits.append(lease.waited)
        self.in_flight += 1
        if lease is not None:
            lease.dispatched()
        try:
            await self.engine.serve(seconds)
        finally:
            self.in_flight -= 1
            if lease is not None:
                lease.release()
        return self.loop.time() - start

    async def low_client(self, index: int) -> None:
        rng = random.Random(f"{self.s.seed}/low/{index}")
        key = f"low-{index % self.s.low_keys}"
        while True:
            try:
                await self.request("bronze", key, rng.uniform(*self.s.service))
            except GatewayError:
                self.report.low_refused += self.measuring()
                await asyncio.sleep(_RETRY_AFTER)
                continue
            self.report.low_completed += self.measuring()

    async def high_client(self, index: int) -> None:
        rng = random.Random(f"{self.s.seed}/high/{index}")
        while True:
            await asyncio.sleep(rng.uniform(*self.s.think))
            latency = await self.request(
                self.s.high_band, f"high-{index}", rng.uniform(*self.s.service)
            )
            if self.measuring():
                self.report.high_latencies.append(latency)

    async def scraper(self) -> None:
        while True:
            self.scraped = (self.engine.running, self.engine.waiting)
            self.controller.recheck()
            await asyncio.sleep(_SCRAPE_INTERVAL)

    async def execute(self) -> Report:
        tasks = [asyncio.create_task(self.scraper()), asyncio.create_task(self.controller.run())]
        tasks += [asyncio.create_task(self.low_client(i)) for i in range(self.s.low_clients)]
        tasks += [asyncio.create_task(self.high_client(i)) for i in range(self.s.high_clients)]
        await asyncio.sleep(self.s.duration)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.report.learned_capacity = self.tracker.capacity("toy/toy-1")
        return self.report


def run(scenario: Scenario) -> Report:
    """Simulate ``scenario`` on virtual time; deterministic for a given seed."""

    async def main() -> Report:
        return await _Run(scenario).execute()

    return run_virtual(main())


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("idle: platinum alone", low_clients=0),
    Scenario("admission on: platinum + 500 bronze"),
    Scenario("admission on: gold + 500 bronze", high_band="gold"),
    Scenario("admission off: everything straight to the engine", admission=False),
)
"""The scenarios of docs/admission.md: 32 slots, service 0.5-1.5 s, 4 high-band clients."""


def format_report(report: Report, idle: Report | None = None) -> str:
    """One line per run; with ``idle``, the high band's p50 and p99 as multiples of idle."""
    p50, p99 = report.high_percentile(50), report.high_percentile(99)
    line = (
        f"{report.scenario}: high band p50 {p50:6.2f} s, p99 {p99:6.2f} s "
        f"({len(report.high_latencies)} requests)"
    )
    if idle is not None and idle.high_latencies:
        ratio50, ratio99 = p50 / idle.high_percentile(50), p99 / idle.high_percentile(99)
        line += f" = {ratio50:5.2f}x / {ratio99:5.2f}x idle"
    if report.low_completed or report.low_refused:
        mean_wait = sum(report.low_waits) / len(report.low_waits) if report.low_waits else 0.0
        line += (
            f"\n  bronze: {report.low_throughput:5.1f} req/s, refused {report.low_refused}, "
            f"mean wait in the gateway queue {mean_wait:5.1f} s"
        )
    return line


def main() -> None:
    """Run every scenario and print its figures."""
    idle: Report | None = None
    for scenario in SCENARIOS:
        report = run(scenario)
        idle = idle or report
        print(format_report(report, idle))


if __name__ == "__main__":
    main()
