"""The node agent: dial the control plane, register, follow the desired state.

One stream at a time, over mutual TLS. On connect the agent sends its registration
(inventory, labels, the replicas it runs, the last version it applied); the control
plane answers with the whole desired state, which the agent reconciles to — starting
what is missing after `launch.check`, draining and stopping what is no longer wanted,
keeping what already runs (so a reconnect, or a restarted control plane, relaunches
nothing) — and acknowledges with `Applied`. Heartbeats go at the interval the desired
state names, with the inventory when it changed (probed every `inventory_interval`);
every replica state change goes up as it happens.

A stream that ends for any reason other than `stop()` is an error: the agent waits a
jittered, growing backoff and dials again, forever. Given several control plane
addresses (an active one and standbys, which refuse the stream), each failure dials the
next, and the backoff grows once per round of them. (Treating a refused stream as a
clean close would reset the backoff and hammer the control plane at the base rate
with nothing in the log.) `stop()` cancels the open call, which unblocks the stream's
read at once: stopping never waits on a stream that is only reading.

Engines outlive the agent. With a state directory (`fleet.state`) the agent records
each engine it launches; a restarted agent adopts those still running as launched
(same process, same argument list) before it registers, so its registration lists
them and the control plane relaunches nothing. `stop()` leaves the engines running
unless asked to stop them.

A replica whose spec carries a higher `generation` than the one it runs under is
relaunched: that is how an operator takes a replica out of `crash_loop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import grpc

from fairgate.engines.metrics import LLAMA_SERVER_METRICS, VLLM_METRICS, parse_engine_metrics
from fairgate.fleet.state import Record, StateDir, matching_process, safe_name, write_private
from fairgate.fleet.v1 import fleet_pb2, fleet_pb2_grpc
from fairgate.inventory.model import Inventory
from fairgate.inventory.probe import ProbeError
from fairgate.launch import Command, Profile, check, command
from fairgate.launch.supervise import Report, Supervisor

__all__ = ["Agent"]

log = logging.getLogger(__name__)

_CLOSE_WAIT = 5.0
"""How long a stopping agent waits for its last statuses to reach the control plane."""


class _Outgoing:
    """The stream's request iterator: the messages queued for this session.

    A class, not an async generator: gRPC closes the iterator from another task when
    the call ends, and closing a generator that is suspended in `get()` fails."""

    def __init__(self, queue: asyncio.Queue[fleet_pb2.AgentMessage | None]) -> None:
        self._queue = queue

    def __aiter__(self) -> _Outgoing:
        return self

    async def __anext__(self) -> fleet_pb2.AgentMessage:
        message = await self._queue.get()
        if message is None:  # the agent closes its side: what was queued went first
            raise StopAsyncIteration
        return message


class Agent:
    def __init__(
        self,
        *,
        target: str | Sequence[str],
        credentials: grpc.ChannelCredentials,
        node_name: str,
        inventory: Callable[[], Inventory],
        labels: dict[str, str] | None = None,
        channel_options: Sequence[tuple[str, str | int]] = (),
        backoff_base: float = 1.0,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
        supervisor_options: dict[str, float] | None = None,
        state_dir: StateDir | None = None,
        allocation_ends_at: int = 0,
        inventory_interval: float = 30.0,
        drain_seconds: float = 30.0,
        device_ids: Callable[[Inventory, tuple[int, ...]], tuple[str, ...] | None] | None = None,
        keepalive: float = 10.0,
    ) -> None:
        self._targets = [target] if isinstance(target, str) else list(target)
        if not self._targets:
            raise ValueError("no control plane address")
        self._next = 0
        self._target = self._targets[0]
        self._credentials = credentials
        # HTTP/2 pings every `keepalive` s, each answered within as long, or the stream
        # fails and the next address is dialled: a control plane whose host froze or
        # whose network was cut sends no reset, and the heartbeats written meanwhile
        # only fill TCP buffers (the kernel gives up after some 15 minutes).
        ms = int(keepalive * 1000)
        self._options = [
            ("grpc.keepalive_time_ms", ms),
            ("grpc.keepalive_timeout_ms", ms),
            ("grpc.http2.ping_timeout_ms", ms),
            *channel_options,
        ]
        self.node_name = node_name
        self._inventory = inventory
        self._labels = labels or {}
        self._base = backoff_base
        self._cap = backoff_cap
        self._rng = rng or random.Random()
        self._supervisor_options = supervisor_options or {}
        self._state = state_dir
        self._keys: Path | None = None
        self.allocation_ends_at = allocation_ends_at
        self._device_ids = device_ids
        self._adopted = False
        self.inventory_interval = inventory_interval
        self.drain_seconds = drain_seconds
        self._last_inventory = Inventory(source="none")
        self._sent_inventory = ""
        self._stopping = asyncio.Event()
        self._call: grpc.aio.StreamStreamCall | None = None
        self._outbox: asyncio.Queue[fleet_pb2.AgentMessage | None] = asyncio.Queue()
        self._session_ended = asyncio.Event()
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
        """Adopt what an earlier agent left running, then connect, and reconnect after
        every failure, until stop()."""
        if not self._adopted:
            self._adopted = True
            await self.adopt()
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
            rounds = -(-self.failures // len(self._targets))
            delay = self.backoff(rounds)
            failed = self._target
            self._next = (self._next + 1) % len(self._targets)
            self._target = self._targets[self._next]
            log.warning(
                "control plane %s: %s; dialling again in %.1f s (%s)",
                failed,
                self.last_error,
                delay,
                self._target,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def stop(self, *, stop_engines: bool = False) -> None:
        """End the stream at once; with `stop_engines`, drain and stop every replica first,
        each stop reported on the open stream, which is then closed once what was queued
        has gone (at most `_CLOSE_WAIT` s): the control plane takes the acknowledged stops
        as the fence that lets it place those replicas elsewhere at once."""
        self._stopping.set()
        if stop_engines:
            await self.stop_engines()
            if self._call is not None:
                self._session_ended.clear()
                self._outbox.put_nowait(None)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._session_ended.wait(), _CLOSE_WAIT)
        if self._call is not None:
            self._call.cancel()

    async def _session(self) -> None:
        async with grpc.aio.secure_channel(
            self._target, self._credentials, options=self._options
        ) as channel:
            self._sent_inventory = (await asyncio.to_thread(self._probe)).to_json()
            # No await from here to the registration: it must be the stream's first
            # message, and what changed before it is in its snapshot.
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
                    if message.HasField("desired") and not self._stopping.is_set():
                        if fresh:  # the control plane accepted the registration
                            log.info("registered with %s as %s", self._target, self.node_name)
                            fresh = False
                            self.connects += 1
                            self.failures = 0
                        await self._reconcile(message.desired)
            finally:
                beats.cancel()
                self._call = None
                self._session_ended.set()

    def _register(self) -> fleet_pb2.AgentMessage:
        return fleet_pb2.AgentMessage(
            register=fleet_pb2.Register(
                node_name=self.node_name,
                labels=self._labels,
                inventory_json=self._sent_inventory,
                running=[self._status(rid) for rid in self.replicas],
                applied_version=self.applied_version,
                allocation_ends_at=self.allocation_ends_at,
            )
        )

    def _probe(self) -> Inventory:
        """The inventory now; on a failed probe, the last one (or none), with a warning:
        a node whose nvidia-smi fails once is not a node without GPUs to keep."""
        try:
            self._last_inventory = self._inventory()
        except (ProbeError, OSError, ValueError) as exc:
            log.warning("inventory probe failed, reporting the last one: %s", exc)
        return self._last_inventory

    async def _heartbeats(self) -> None:
        """A heartbeat every interval; with it, every `inventory_interval`, the inventory
        when it changed (measured memory and compute processes move under other jobs)."""
        sequence = 0
        probed = time.monotonic()
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            sequence += 1
            refreshed = ""
            if time.monotonic() - probed >= self.inventory_interval:
                probed = time.monotonic()
                fresh = (await asyncio.to_thread(self._probe)).to_json()
                if fresh != self._sent_inventory:
                    refreshed = self._sent_inventory = fresh
            self._outbox.put_nowait(
                fleet_pb2.AgentMessage(
                    heartbeat=fleet_pb2.Heartbeat(
                        sequence=sequence,
                        inventory_json=refreshed,
                        allocation_ends_at=self.allocation_ends_at,
                    )
                )
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
            adopted=report.adopted,
            generation=spec.generation,
        )

    def _on_state(self, replica_id: str) -> Callable[[Report], None]:
        def report(state: Report) -> None:
            if replica_id in self.replicas:
                self._save(replica_id)
                self._outbox.put_nowait(fleet_pb2.AgentMessage(status=self._status(replica_id)))

        return report

    def _save(self, replica_id: str) -> None:
        if self._state is None:
            return
        spec, sup = self.replicas[replica_id]
        report = sup.report
        self._state.save(
            Record(
                replica_id=replica_id,
                spec=Record.spec_dict(spec),
                argv=list(sup.command.argv),
                pid=sup.pid or 0,
                started_at=sup.started_at or 0.0,
                state=report.state,
                exit_code=report.exit_code,
                tail=list(report.tail),
                restarts=report.restarts,
            )
        )

    def _supervisor(self, replica_id: str, spec: fleet_pb2.ReplicaSpec, cmd: Command) -> Supervisor:
        return Supervisor(
            cmd,
            f"http://127.0.0.1:{spec.port}/health",
            on_state=self._on_state(replica_id),
            log_path=self._state.log_path(replica_id) if self._state is not None else None,
            **self._supervisor_options,  # type: ignore[arg-type]
        )

    async def adopt(self) -> None:
        """Take over the engines an earlier agent with this state directory launched.

        Those still running as launched are supervised again, unrestarted; a replica
        that was in crash_loop stays there (with its exit code and output); records of
        engines that are gone are dropped (the desired state relaunches them if still
        wanted)."""
        if self._state is None:
            return
        self.applied_version = self._state.applied_version()
        inventory = await asyncio.to_thread(self._probe)
        for record in self._state.records():
            process = matching_process(record)
            try:
                spec = record.replica_spec()
            except ValueError as exc:
                log.error(
                    "replica %s: its record cannot be used (%s)%s",
                    record.replica_id,
                    exc,
                    f"; its engine, pid {process.pid}, runs on unsupervised" if process else "",
                )
                self._state.forget(record.replica_id)
                continue
            try:
                cmd = self._command(self._profile(spec), inventory)
            except (ValueError, OSError) as exc:
                # Never relaunch it without its key or GPU list; the record stays for an
                # agent started once the key is readable (its GPUs show busy meanwhile).
                log.error(
                    "replica %s: its command cannot be rebuilt (%s)%s",
                    record.replica_id,
                    exc,
                    f"; its engine, pid {process.pid}, runs on unsupervised" if process else "",
                )
                continue
            if process is not None:
                sup = self._supervisor(record.replica_id, spec, cmd)
                self.replicas[record.replica_id] = (spec, sup)
                sup.adopt(process, restarts=record.restarts, healthy=await sup.healthy(process))
                log.info(
                    "replica %s: adopted the running engine (pid %d, port %d)",
                    record.replica_id,
                    process.pid,
                    spec.port,
                )
            elif record.state == "crash_loop":
                sup = self._supervisor(record.replica_id, spec, cmd)
                sup.hold_crash_loop(
                    Report(
                        "crash_loop",
                        record.restarts,
                        record.exit_code,
                        tuple(record.tail),
                    )
                )
                self.replicas[record.replica_id] = (spec, sup)
                log.info("replica %s: still in crash_loop", record.replica_id)
            else:
                log.info(
                    "replica %s: its engine (pid %d) no longer runs as launched",
                    record.replica_id,
                    record.pid,
                )
                self._state.forget(record.replica_id)

    def _keyed(self, replica_id: str, spec: fleet_pb2.ReplicaSpec) -> fleet_pb2.ReplicaSpec:
        """`spec` with a key sent inline (a vault secret the control plane read) moved to
        a key file of the agent's own (mode 0600), named by `api_key_ref`: the engine and
        the drain's metric reads find it as they find any key file, and the spec kept in
        memory and in the state directory never holds the key."""
        if not spec.api_key:
            return spec
        path = self._key_path(replica_id)
        write_private(path, spec.api_key)
        keyed = fleet_pb2.ReplicaSpec()
        keyed.CopyFrom(spec)
        keyed.ClearField("api_key")
        keyed.api_key_ref = str(path)
        return keyed

    def _key_path(self, replica_id: str) -> Path:
        if self._state is not None:
            return self._state.key_path(replica_id)
        if self._keys is None:  # no state directory: a private one for this agent's life
            self._keys = Path(tempfile.mkdtemp(prefix="fairgate-agent-keys-"))
        return self._keys / f"{safe_name(replica_id)}.key"

    def _forget(self, replica_id: str) -> None:
        if self._state is not None:
            self._state.forget(replica_id)
        elif self._keys is not None:
            (self._keys / f"{safe_name(replica_id)}.key").unlink(missing_ok=True)

    def _profile(self, spec: fleet_pb2.ReplicaSpec) -> Profile:
        return Profile(
            engine=spec.engine,  # type: ignore[arg-type]
            model=spec.model,
            served_name=spec.served_name,
            port=spec.port,
            gpus=tuple(spec.gpus),
            tensor_parallel_size=spec.tensor_parallel_size or 1,
            args=tuple(spec.args),
            api_key_file=Path(spec.api_key_ref) if spec.api_key_ref else None,
            host=spec.host or "127.0.0.1",
        )

    def _command(self, profile: Profile, inventory: Inventory) -> Command:
        api_key = None
        if profile.api_key_file is not None and profile.engine == "vllm":
            api_key = profile.api_key_file.read_text().strip()
        devices = self._device_ids(inventory, profile.gpus) if self._device_ids else None
        return command(profile, api_key=api_key, devices=devices)

    @staticmethod
    def _key_headers(spec: fleet_pb2.ReplicaSpec) -> dict[str, str]:
        if spec.api_key_ref:
            with contextlib.suppress(OSError):
                return {"Authorization": f"Bearer {Path(spec.api_key_ref).read_text().strip()}"}
        return {}

    async def _in_flight(self, spec: fleet_pb2.ReplicaSpec, headers: dict[str, str]) -> int:
        """Requests the engine runs or queues, from its /metrics (vLLM's or llama.cpp's
        names); 0 when it does not answer or export them, so a drain never waits on an
        engine that cannot say."""
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
                session.get(f"http://127.0.0.1:{spec.port}/metrics", headers=headers) as answer,
            ):
                if answer.status != 200:
                    return 0
                text = await answer.text()
        except (aiohttp.ClientError, TimeoutError):
            return 0
        for names in (VLLM_METRICS, LLAMA_SERVER_METRICS):
            try:
                load = parse_engine_metrics(text, names)
            except ValueError:
                continue
            if load.running is not None or load.waiting is not None:
                return int((load.running or 0) + (load.waiting or 0))
        return 0

    async def _remove(self, replica_id: str) -> None:
        entry = self.replicas.get(replica_id)
        if entry is None:
            return
        spec, sup = entry
        headers = self._key_headers(spec)
        await sup.stop(drain=self.drain_seconds, in_flight=lambda: self._in_flight(spec, headers))
        if self.replicas.get(replica_id) is not entry:
            return  # removed meanwhile (a desired state and stop_engines both stopped it)
        self._outbox.put_nowait(fleet_pb2.AgentMessage(status=self._status(replica_id)))
        del self.replicas[replica_id]
        self._forget(replica_id)

    async def stop_engines(self) -> None:
        """Drain and stop every replica (and forget them)."""
        await asyncio.gather(*(self._remove(rid) for rid in list(self.replicas)))

    async def _reconcile(self, desired: fleet_pb2.DesiredState) -> None:
        if desired.heartbeat_interval_seconds > 0:
            self.heartbeat_interval = desired.heartbeat_interval_seconds
        wanted = {spec.replica_id: spec for spec in desired.replicas if not spec.drain}
        for replica_id in [r for r in self.replicas if r not in wanted]:
            await self._remove(replica_id)
        for replica_id, spec in wanted.items():
            running = self.replicas.get(replica_id)
            if running is not None and spec.generation > running[0].generation:
                log.info(
                    "replica %s: generation %d asked (it runs %d): relaunching",
                    replica_id,
                    spec.generation,
                    running[0].generation,
                )
                await self._remove(replica_id)
        inventory = await asyncio.to_thread(self._probe)
        for replica_id, spec in wanted.items():
            if replica_id in self.replicas:
                continue  # already runs (or was adopted): never relaunched
            problems: list[str] = []
            if spec.engine not in ("vllm", "llama-server", "sim"):
                problems = [f"unknown engine {spec.engine!r}"]
            else:
                try:
                    spec = self._keyed(replica_id, spec)
                except OSError as exc:
                    spec.ClearField("api_key")
                    problems = [f"the engine's key cannot be written: {exc.strerror or exc}"]
                profile = self._profile(spec)
                claimed = {g for s, _ in self.replicas.values() for g in s.gpus}
                problems = problems or check(profile, inventory, claimed=claimed)
            if not problems:
                try:
                    cmd = self._command(profile, inventory)
                except (OSError, ValueError) as exc:
                    problems = [f"the engine's key cannot be read: {exc}"]
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
                            generation=spec.generation,
                        )
                    )
                )
                continue
            sup = self._supervisor(replica_id, spec, cmd)
            self.replicas[replica_id] = (spec, sup)
            sup.start()
        self.applied_version = desired.version
        if self._state is not None:
            self._state.save_applied_version(desired.version)
        self._outbox.put_nowait(
            fleet_pb2.AgentMessage(applied=fleet_pb2.Applied(version=desired.version))
        )
