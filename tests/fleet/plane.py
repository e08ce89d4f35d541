"""A real gRPC control plane (mutual TLS, the suite's test certificates) for the agent tests,
which can be stopped and started again on its port, and the waits those tests share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from tests.redis_server import free_port
from tests.tls_certs import Pki

from fairgate.fleet.control import SERVER_OPTIONS, ControlPlaneService, server_credentials
from fairgate.fleet.v1 import fleet_pb2, fleet_pb2_grpc

__all__ = ["Plane", "Recording", "plane", "serving", "until"]


class Recording(ControlPlaneService):
    """The control plane, keeping every message the nodes sent."""

    def __init__(self) -> None:
        super().__init__(heartbeat_interval=0.2)
        self.received: list[fleet_pb2.AgentMessage] = []

    def statuses(self) -> list[fleet_pb2.ReplicaStatus]:
        return [m.status for m in self.received if m.HasField("status")]

    async def Connect(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[fleet_pb2.AgentMessage],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[fleet_pb2.ControlMessage]:
        async def kept() -> AsyncIterator[fleet_pb2.AgentMessage]:
            async for message in request_iterator:
                self.received.append(message)
                yield message

        async for out in super().Connect(kept(), context):
            yield out


class Plane:
    """A control plane's gRPC server that can be stopped and started again on its port."""

    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        self.port = free_port()
        self.service: ControlPlaneService = Recording()
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        fleet_pb2_grpc.add_ControlPlaneServicer_to_server(self.service, self.server)
        self.server.add_secure_port(
            f"127.0.0.1:{self.port}",
            server_credentials(
                self.pki.server.cert_pem.encode(),
                self.pki.server.key_pem.encode(),
                self.pki.ca.pem.encode(),
            ),
        )
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[Plane]:
    p = Plane(Pki.make(tmp_path))
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


async def until(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def serving(port: int) -> bool:
    async with aiohttp.ClientSession() as session:
        try:
            async with session.get(f"http://127.0.0.1:{port}/health") as answer:
                return answer.status == 200
        except aiohttp.ClientError:
            return False
