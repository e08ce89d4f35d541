"""The agent's stream against the control plane's gRPC server over mutual TLS: a node
registers and receives its desired state, changes reach it on the open stream, and a
certificate for another node, from another CA, or none at all, is refused."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from tests.inventory.test_inventory import smi_inventory
from tests.tls_certs import Authority, Issued, Pki

from fairgate.fleet.control import SERVER_OPTIONS, ControlPlaneService, server_credentials
from fairgate.fleet.v1 import fleet_pb2, fleet_pb2_grpc


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[tuple[ControlPlaneService, int, Pki]]:
    async with serving(tmp_path, heartbeat_interval=5) as started:
        yield started


@pytest.fixture
async def quick_plane(tmp_path: Path) -> AsyncIterator[tuple[ControlPlaneService, int, Pki]]:
    """Heartbeats every 0.1 s: a stream silent for 0.2 s is taken for dead."""
    async with serving(tmp_path, heartbeat_interval=0.1) as started:
        yield started


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, *, heartbeat_interval: float
) -> AsyncIterator[tuple[ControlPlaneService, int, Pki]]:
    pki = Pki.make(tmp_path)
    service = ControlPlaneService(heartbeat_interval=heartbeat_interval)
    server = grpc.aio.server(options=SERVER_OPTIONS)
    fleet_pb2_grpc.add_ControlPlaneServicer_to_server(service, server)
    port = server.add_secure_port(
        "127.0.0.1:0",
        server_credentials(
            pki.server.cert_pem.encode(), pki.server.key_pem.encode(), pki.ca.pem.encode()
        ),
    )
    await server.start()
    try:
        yield service, port, pki
    finally:
        await server.stop(grace=None)


def channel(port: int, ca: Authority, client: Issued | None) -> grpc.aio.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.pem.encode(),
        private_key=client.key_pem.encode() if client else None,
        certificate_chain=client.cert_pem.encode() if client else None,
    )
    return grpc.aio.secure_channel(
        f"127.0.0.1:{port}", credentials, options=[("grpc.ssl_target_name_override", "localhost")]
    )


def register(node: str) -> fleet_pb2.AgentMessage:
    return fleet_pb2.AgentMessage(
        register=fleet_pb2.Register(
            node_name=node,
            labels={"site": "paris"},
            inventory_json=smi_inventory("hgx-h100").to_json(),
        )
    )


async def test_a_node_registers_and_follows_its_desired_state(plane) -> None:  # type: ignore[no-untyped-def]
    service, port, pki = plane
    cert = pki.ca.issue("agent", dns_names=("gpu01",))
    async with channel(port, pki.ca, cert) as ch:
        queue: asyncio.Queue[fleet_pb2.AgentMessage | None] = asyncio.Queue()
        queue.put_nowait(register("gpu01"))

        async def up() -> AsyncIterator[fleet_pb2.AgentMessage]:
            while (m := await queue.get()) is not None:
                yield m

        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(up())
        first = await stream.read()
        assert first.desired.version == 0 and first.desired.heartbeat_interval_seconds == 5
        node = service.nodes["gpu01"]
        assert len(node.inventory.gpus) == 8 and node.labels == {"site": "paris"}
        spec = fleet_pb2.ReplicaSpec(replica_id="r1", engine="sim", model="sim", port=9001)
        assert service.set_desired("gpu01", [spec]) == 1
        second = await stream.read()
        assert second.desired.version == 1
        assert [r.replica_id for r in second.desired.replicas] == ["r1"]
        queue.put_nowait(fleet_pb2.AgentMessage(applied=fleet_pb2.Applied(version=1)))
        queue.put_nowait(None)
        assert await stream.read() == grpc.aio.EOF
    assert service.nodes["gpu01"].applied_version == 1
    assert not service.nodes["gpu01"].connected


async def test_a_common_name_is_the_identity_without_a_san(plane) -> None:  # type: ignore[no-untyped-def]
    service, port, pki = plane
    async with channel(port, pki.ca, pki.ca.issue("gpu03")) as ch:
        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(iter([register("gpu03")]))
        assert (await stream.read()).desired.version == 0
    assert "gpu03" in service.nodes


IP_SAN = x509.IPAddress(ipaddress.ip_address("10.9.9.9"))
EMAIL_SAN = x509.RFC822Name("alice@example.org")
URI_SAN = x509.UniformResourceIdentifier("spiffe://fleet/gpu09")


@pytest.mark.parametrize(
    ("sans", "identity", "not_identity"),
    [
        ((IP_SAN,), "gpu01", "10.9.9.9"),
        ((EMAIL_SAN,), "gpu01", "alice@example.org"),
        ((URI_SAN,), "gpu01", "spiffe://fleet/gpu09"),
        ((IP_SAN, x509.DNSName("gpu05")), "gpu05", "10.9.9.9"),
    ],
)
async def test_only_dns_sans_name_a_node(  # type: ignore[no-untyped-def]
    plane, sans: tuple[x509.GeneralName, ...], identity: str, not_identity: str
) -> None:
    """An IP, e-mail or URI SAN is not a node name: without a DNS SAN the CN is."""
    service, port, pki = plane
    cert = pki.ca.issue("gpu01", other_sans=sans)
    async with channel(port, pki.ca, cert) as ch:
        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(iter([register(not_identity)]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stream.read()
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert not_identity not in service.nodes and service.refusals == 1
    async with channel(port, pki.ca, cert) as ch:
        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(iter([register(identity)]))
        assert (await stream.read()).desired.version == 0
    assert identity in service.nodes


async def test_a_certificate_for_another_node_is_refused_and_logged(  # type: ignore[no-untyped-def]
    plane, caplog: pytest.LogCaptureFixture
) -> None:
    service, port, pki = plane
    cert = pki.ca.issue("agent", dns_names=("gpu01",))
    caplog.set_level(logging.WARNING, logger="fairgate.fleet.control")
    async with channel(port, pki.ca, cert) as ch:
        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(iter([register("gpu02")]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stream.read()
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "gpu02" not in service.nodes and service.refusals == 1
    assert "a certificate for gpu01 claimed to be node 'gpu02'" in caplog.text


async def test_a_stream_that_does_not_start_with_a_registration_is_refused(plane) -> None:  # type: ignore[no-untyped-def]
    service, port, pki = plane
    cert = pki.ca.issue("agent", dns_names=("gpu01",))
    beat = fleet_pb2.AgentMessage(heartbeat=fleet_pb2.Heartbeat(sequence=1))
    async with channel(port, pki.ca, cert) as ch:
        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(iter([beat]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stream.read()
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert service.nodes == {}


@pytest.mark.parametrize("who", ["other CA", "no certificate"])
async def test_no_stream_without_a_certificate_of_the_ca(plane, who: str) -> None:  # type: ignore[no-untyped-def]
    service, port, pki = plane
    client = pki.other.issue("agent", dns_names=("gpu01",)) if who == "other CA" else None
    async with channel(port, pki.ca, client) as ch:
        stream = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(iter([register("gpu01")]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stream.read()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert service.nodes == {} and service.refusals == 0


class Stream:
    """One agent's stream, driven by hand: what it sends is queued."""

    def __init__(self, ch: grpc.aio.Channel, first: fleet_pb2.AgentMessage) -> None:
        self.queue: asyncio.Queue[fleet_pb2.AgentMessage | None] = asyncio.Queue()
        self.queue.put_nowait(first)
        self.call = fleet_pb2_grpc.ControlPlaneStub(ch).Connect(self._up())

    async def _up(self) -> AsyncIterator[fleet_pb2.AgentMessage]:
        while (m := await self.queue.get()) is not None:
            yield m


def register_from(node: str, site: str) -> fleet_pb2.AgentMessage:
    message = register(node)
    message.register.labels["site"] = site
    return message


async def test_a_second_agent_as_a_connected_node_is_refused_and_the_first_keeps_it(  # type: ignore[no-untyped-def]
    plane, caplog: pytest.LogCaptureFixture
) -> None:
    """The same certificate on two machines (copied, or a second agent started by
    mistake): the agent already connected keeps the node, its labels, inventory and
    desired state; the second is refused and the log names the node."""
    service, port, pki = plane
    cert = pki.ca.issue("agent", dns_names=("gpu01",))
    caplog.set_level(logging.WARNING, logger="fairgate.fleet.control")
    async with channel(port, pki.ca, cert) as first_ch, channel(port, pki.ca, cert) as second_ch:
        first = Stream(first_ch, register_from("gpu01", "paris"))
        assert (await first.call.read()).desired.version == 0
        second = Stream(second_ch, register_from("gpu01", "lyon"))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await second.call.read()
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert service.nodes["gpu01"].labels == {"site": "paris"}
        assert "node gpu01 already has an agent connected" in caplog.text

        # The first stream still follows the node's desired state and reports for it.
        spec = fleet_pb2.ReplicaSpec(replica_id="r1", engine="sim", model="sim", port=9001)
        service.set_desired("gpu01", [spec])
        assert [r.replica_id for r in (await first.call.read()).desired.replicas] == ["r1"]
        first.queue.put_nowait(fleet_pb2.AgentMessage(applied=fleet_pb2.Applied(version=1)))
        first.queue.put_nowait(None)
        assert await first.call.read() == grpc.aio.EOF
    assert service.nodes["gpu01"].applied_version == 1


async def test_a_silent_stream_is_ended_by_the_nodes_next_registration(quick_plane) -> None:  # type: ignore[no-untyped-def]
    """A stream that stopped sending (its connection half-open after a crash or a cut)
    does not hold the node: the agent registering again takes it and the old stream
    ends."""
    service, port, pki = quick_plane
    cert = pki.ca.issue("agent", dns_names=("gpu01",))
    async with channel(port, pki.ca, cert) as old_ch, channel(port, pki.ca, cert) as new_ch:
        old = Stream(old_ch, register_from("gpu01", "paris"))
        assert (await old.call.read()).desired.version == 0
        for _ in range(100):  # refused while the old stream was heard recently
            new = Stream(new_ch, register_from("gpu01", "lyon"))
            try:
                accepted = await new.call.read()
                break
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.ALREADY_EXISTS
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the node's new stream was never accepted")
        assert accepted.desired.version == 0
        assert service.nodes["gpu01"].labels == {"site": "lyon"}
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(10):
                await old.call.read()
        assert ended.value.code() == grpc.StatusCode.ABORTED
        new.queue.put_nowait(fleet_pb2.AgentMessage(applied=fleet_pb2.Applied(version=3)))
        async with asyncio.timeout(10):
            while service.nodes["gpu01"].applied_version != 3:
                await asyncio.sleep(0.01)
        assert service.nodes["gpu01"].connected
        new.queue.put_nowait(None)


async def test_statuses_of_replicas_never_placed_on_the_node_are_not_kept(plane) -> None:  # type: ignore[no-untyped-def]
    """A hostile agent reporting made-up replica ids (thousands, each new) does not grow
    what the control plane keeps of the node: only its own replicas' statuses are."""
    service, port, pki = plane
    cert = pki.ca.issue("agent", dns_names=("gpu01",))
    async with channel(port, pki.ca, cert) as ch:
        agent = Stream(ch, register("gpu01"))
        assert (await agent.call.read()).desired.version == 0
        spec = fleet_pb2.ReplicaSpec(replica_id="r1", engine="sim", model="sim", port=9001)
        service.set_desired("gpu01", [spec])
        assert (await agent.call.read()).desired.version == 1
        for i in range(2000):
            status = fleet_pb2.ReplicaStatus(replica_id=f"made-up-{i}", state="ready")
            agent.queue.put_nowait(fleet_pb2.AgentMessage(status=status))
        ready = fleet_pb2.ReplicaStatus(replica_id="r1", state="ready")
        agent.queue.put_nowait(fleet_pb2.AgentMessage(status=ready))
        agent.queue.put_nowait(fleet_pb2.AgentMessage(applied=fleet_pb2.Applied(version=1)))
        agent.queue.put_nowait(None)
        assert await agent.call.read() == grpc.aio.EOF
    node = service.nodes["gpu01"]
    assert node.applied_version == 1  # every message was read
    assert list(node.statuses) == ["r1"]
