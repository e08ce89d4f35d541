"""The node agent: dial the control plane, register, follow the desired state.

One stream at a time, over mutual TLS. On connect the agent sends its registration
(inventory, labels, the replicas it runs, the last version it applied); the control
plane answers with the whole desired state, which the agent reconciles to — starting
what is missing after `launch.check`, draining and stopping what is no longer wanted,
keeping what already runs (so a reconnect, or a restarted control plane, relaunches
nothing) — and acknowledges with `Applied`. Heartbeats go at the interval the desired
state names; every replica state change goes up as it happens.

A stream that ends for any reason other than `stop()` is an error: the agent waits a
jittered, growing backoff and dials again, forever. (Treating a refused stream as a
clean close would reset the backoff and hammer the control plane at the base rate
with nothing in the log.) `stop()` cancels the open call, which unblocks the stream's
read at once: stopping never waits on a stream that is only reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from pathlib import Path

import grpc

from fairgate.fleet.v1 import fleet_pb2, fleet_pb2_grpc
from fairgate.inventory.model import Inventory
from fairgate.launch import Profile, check, command
from fairgate.launch.supervise import Report, Supervisor

__all__ = ["Agent"]

log = logging.getLogger(__name__)


class _Outgoing:
    """The stream's request iterator: the messages queued for this session.

    A class, not an async generator: gRPC closes the iterator from another task when
    the call ends, and closing a generator that is suspended in `get()` fails."""

    def __init__(self, queue: asyncio.Queue[fleet_pb2.AgentMessage]) -> None:
        self._queue = queue

    def __aiter__(self) -> _Outgoing:
        return self

    async def __anext__(self) -> fleet_pb2.AgentMessage:
        return await self._queue.get()


class Agent:
    def __init__(
        self,
        *,
        target: str,
        credentials: grpc.ChannelCredentials,
        node_name: str,
        inventory: Callable[[], Inventory],
        labels: dict[str, str] | None = None,
        channel_options: list[tuple[str, str]] | None = None,
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
        supervisor_options: dict[str, float] | None = None,
    ) -> None:
        self._target = target
        self._credentials = credentials
        self._options = channel_options or []
        self.node_name = node_name
        self._inventory = inventory
        self._labels = labels or {}
        self._base = backoff_base
        self._cap = backoff_cap
        self._rng = rng or random.Random()
        self._supervisor_options = supervisor_options or {}
        self._stopping = asyncio.Event()
        self._call: grpc.aio.StreamStreamCall | None = None
        self._outbox: asyncio.Queue[fleet_pb2.AgentMessage] = asyncio.Queue()
        self.replicas: dict[str, tuple[fleet_pb2.ReplicaSpec, Supervisor]] = {}
        self.applied_version = 0
        self.heartbeat_interval = 5.0
        self.connects = 0
        self.failures = 0
        self.last_error = ""

    # --- the connection -------------------------------------------------------------

    def backoff(self, failures: int) -> float:
        ceiling = min(self._cap, self._base * 2 ** max(failures - 1, 0))
        return self._rng.uniform(ceiling / 2, ceiling)

    async def run(self) -> None:
        """Connect, and reconnect after every failure, until stop()."""
        while not self._stopping.is_set():
            try:
                await self._session()
            except grpc.aio.AioRpcError as exc:
                if self._stopping.is_set():
                    break
                self.last_error = f"{exc.code().name}: {exc.details()}"
            except asyncio.CancelledError:
                # A call the server cancels (it went away mid-stream) surfaces as
                # CancelledError from read(); a cancellation of this task re-raises.
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                if self._stopping.is_set():
                    break
                self.last_error = "the stream was cancelled by the control plane going away"
            except (OSError, asyncio.IncompleteReadError) as exc:
                self.last_error = str(exc)
            else:
                if self._stopping.is_set():
                    break
                self.last_error = "the control plane ended the stream"
            self.failures += 1
            delay = self.backoff(self.failures)
            log.warning(
                "control plane %s: %s; dialling again in %.1f s",
                self._target,
                self.last_error,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def stop(self, *, stop_engines: bool = False) -> None:
        """End the stream at once; with `stop_engines`, drain and stop every replica too."""
        self._stopping.set()
        if self._call is not None:
            self._call.cancel()
        if stop_engines:
            await asyncio.gather(*(sup.stop() for _, sup in self.replicas.values()))

    async def _session(self) -> None:
        async with grpc.aio.secure_channel(
            self._target, self._credentials, options=self._options
        ) as channel:
            self._outbox = asyncio.Queue()
            self._outbox.put_nowait(self._register())
            stub = fleet_pb2_grpc.ControlPlaneStub(channel)  # type: ignore[no-untyped-call]
            call = stub.Connect(_Outgoing(self._outbox))
            self._call = call
            beats = asyncio.create_task(self._heartbeats())
            fresh = True
            try:
                while True:
                    message = await call.read()
                    if message == grpc.aio.EOF:
                        return
                    if message.HasField("desired"):
                        if fresh:  # the control plane accepted the registration
                            log.info("registered with %s as %s", self._target, self.node_name)
                            fresh = False
                            self.connects += 1
                            self.failures = 0
                        await self._reconcile(message.desired)
            finally:
                beats.cancel()
                self._call = None

    def _register(self) -> fleet_pb2.AgentMessage:
        return fleet_pb2.AgentMessage(
            register=fleet_pb2.Register(
                node_name=self.node_name,
                labels=self._labels,
                inventory_json=self._inventory().to_json(),
                running=[self._status(rid) for rid in self.replicas],
                applied_version=self.applied_version,
            )
        )

    async def _heartbeats(self) -> None:
        sequence = 0
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            sequence += 1
            self._outbox.put_nowait(
                fleet_pb2.AgentMessage(heartbeat=fleet_pb2.Heartbeat(sequence=sequence))
            )

    # --- the replicas ---------------------------------------------------------------

    def _status(self, replica_id: str) -> fleet_pb2.ReplicaStatus:
        spec, sup = self.replicas[replica_id]
        report = sup.report
        return fleet_pb2.ReplicaStatus(
            replica_id=replica_id,
            model=spec.served_name,
            state=report.state,
            port=spec.port,
            gpus=list(spec.gpus),
            pid=sup.pid or 0,
            exit_code=report.exit_code or 0,
            tail=list(report.tail),
            restarts=report.restarts,
        )

    def _on_state(self, replica_id: str) -> Callable[[Report], None]:
        def report(_: Report) -> None:
            if replica_id in self.replicas:
                self._outbox.put_nowait(fleet_pb2.AgentMessage(status=self._status(replica_id)))

        return report

    async def _reconcile(self, desired: fleet_pb2.DesiredState) -> None:
        if desired.heartbeat_interval_seconds > 0:
            self.heartbeat_interval = desired.heartbeat_interval_seconds
        wanted = {spec.replica_id: spec for spec in desired.replicas if not spec.drain}
        for replica_id in [r for r in self.replicas if r not in wanted]:
            _, sup = self.replicas[replica_id]
            await sup.stop()
            self._outbox.put_nowait(fleet_pb2.AgentMessage(status=self._status(replica_id)))
            del self.replicas[replica_id]
        inventory = self._inventory()
        for replica_id, spec in wanted.items():
            if replica_id in self.replicas:
                continue  # already runs: adopted, never relaunched
            profile = Profile(
                engine=spec.engine,
                model=spec.model,
                served_name=spec.served_name,
                port=spec.port,
                gpus=tuple(spec.gpus),
                tensor_parallel_size=spec.tensor_parallel_size or 1,
                args=tuple(spec.args),
                api_key_file=Path(spec.api_key_ref) if spec.api_key_ref else None,
            )
            claimed = {g for s, _ in self.replicas.values() for g in s.gpus}
            problems = (
                [f"unknown engine {spec.engine!r}"]
                if spec.engine not in ("vllm", "llama-server", "sim")
                else check(profile, inventory, claimed=claimed)
            )
            if problems:
                log.warning("replica %s refused before launch: %s", replica_id, "; ".join(problems))
                self._outbox.put_nowait(
                    fleet_pb2.AgentMessage(
                        status=fleet_pb2.ReplicaStatus(
                            replica_id=replica_id,
                            model=spec.served_name,
                            state="failed",
                            port=spec.port,
                            tail=problems,
                        )
                    )
                )
                continue
            api_key = None
            if profile.api_key_file is not None and profile.engine == "vllm":
                api_key = profile.api_key_file.read_text().strip()
            sup = Supervisor(
                command(profile, api_key=api_key),
                f"http://{profile.host}:{profile.port}/health",
                on_state=self._on_state(replica_id),
                **self._supervisor_options,  # type: ignore[arg-type]
            )
            self.replicas[replica_id] = (spec, sup)
            sup.start()
        self.applied_version = desired.version
        self._outbox.put_nowait(
            fleet_pb2.AgentMessage(applied=fleet_pb2.Applied(version=desired.version))
        )
