"""The fleet's configuration: the ``control_plane:`` section and a model's ``deploy:`` profile.

control_plane:
  listen: {host: 0.0.0.0, port: 8443}     # where agents dial in (gRPC, mutual TLS)
  tls: {cert_file: cp.crt, key_file: cp.key, client_ca_file: fleet-ca.crt}
  heartbeat_interval: 5s                  # how often each agent sends a heartbeat
  unreachable_after: 15s                  # silent this long: unreachable (still routed)
  lost_after: 120s                        # silent this long and fenced: lost, re-placed
  ports: {first: 20000, last: 20999}      # the engines' ports the control plane hands out
  engine_host: 0.0.0.0                    # where engines listen on their node
  allocation_margin: 10m                  # drain a Slurm node's replicas this long before its end
  replacement_deadline: 10m               # a draining replica serves this long at most while
                                          # its replacement starts

models:
  - name: chat
    deploy: {engine: vllm, model: meta-llama/Llama-3.1-8B-Instruct, replicas: 2,
             gpus_per_replica: 1, tensor_parallel_size: 1, node_labels: {zone: a}}

A model has either ``upstreams`` or ``deploy``, never both (checked on the model).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, StrictStr, model_validator

from fairgate.config.fields import Name, Port, PositiveDuration, Section
from fairgate.config.secrets import SecretRef

__all__ = ["ControlPlane", "ControlPlaneListen", "ControlPlaneTls", "Deploy", "PortRange"]

DeployEngine = Literal["vllm", "llama-server", "sim"]


class ControlPlaneListen(Section):
    """The gRPC listener agents dial: ``host`` and ``port`` (0: any free port)."""

    host: Name = "0.0.0.0"  # noqa: S104 - agents on other machines dial in
    port: Port = 8443


class ControlPlaneTls(Section):
    """Mutual TLS for the agents' stream: the control plane's certificate chain and key,
    and the CA whose certificates the agents must present (a node's identity is its
    certificate's DNS SAN, else its CN)."""

    cert_file: SecretRef
    key_file: SecretRef
    client_ca_file: SecretRef


class PortRange(Section):
    """The ports handed to placed engines, ``first`` to ``last`` inclusive."""

    first: StrictInt = Field(default=20000, ge=1024, le=65535)
    last: StrictInt = Field(default=20999, ge=1024, le=65535)

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.last < self.first:
            raise ValueError(f"last ({self.last}) must be at least first ({self.first})")
        return self


class ControlPlane(Section):
    """The control plane inside ``fairgate serve``: agents dial ``listen`` over mutual
    TLS (``tls``), send a heartbeat every ``heartbeat_interval``; a node silent for
    ``unreachable_after`` is unreachable (its engines stay in routing while they pass
    their health checks), silent for ``lost_after`` with no engine of it answering it is
    lost and its replicas are placed elsewhere. A draining node's replica keeps serving
    until its replacement is ready elsewhere, at most ``replacement_deadline`` once the
    replacement is placed (for ever while none fits). Engines listen on ``engine_host`` of
    their node (``0.0.0.0``: the gateway reaches them at the node's address; ``127.0.0.1``
    when every agent runs on the gateway's machine). Of the control planes on one store
    only the holder of the store's lease places and commands; it renews the lease every
    third of ``lease_ttl``, and a standby takes it over once it has expired."""

    listen: ControlPlaneListen = Field(default_factory=ControlPlaneListen)
    tls: ControlPlaneTls
    heartbeat_interval: PositiveDuration = 5.0
    unreachable_after: PositiveDuration = 15.0
    lost_after: PositiveDuration = 120.0
    ports: PortRange = Field(default_factory=PortRange)
    engine_host: Name = "0.0.0.0"  # noqa: S104 - the gateway reaches engines on other nodes
    allocation_margin: PositiveDuration = 600.0
    lease_ttl: PositiveDuration = 15.0
    replacement_deadline: PositiveDuration = 600.0

    @model_validator(mode="after")
    def _ordered(self) -> ControlPlane:
        if self.unreachable_after <= self.heartbeat_interval:
            raise ValueError(
                f"unreachable_after ({self.unreachable_after:g}s) must be longer than "
                f"heartbeat_interval ({self.heartbeat_interval:g}s)"
            )
        if self.lost_after <= self.unreachable_after:
            raise ValueError(
                f"lost_after ({self.lost_after:g}s) must be longer than "
                f"unreachable_after ({self.unreachable_after:g}s)"
            )
        if self.lease_ttl < 3.0:
            raise ValueError(
                f"lease_ttl ({self.lease_ttl:g}s) must be at least 3s: the holder renews it "
                "every third of it"
            )
        return self


class Deploy(Section):
    """Replicas the control plane places and the agents launch, instead of ``upstreams``.

    ``engine`` (vllm, llama-server or sim), ``model`` (the name or local path the engine
    loads; the model's ``upstream_model`` is the name it serves), ``replicas`` wanted,
    ``gpus_per_replica`` (0 only for sim), ``tensor_parallel_size`` (its GPUs in one
    NVLink domain), extra engine ``args``, ``node_labels`` a node must carry, and
    ``key_file``: the engine's API key, read by the gateway and, at the same path, by
    the agent; a vault reference is read by the control plane, which sends the key to
    the agent."""

    engine: DeployEngine
    model: StrictStr = Field(min_length=1, max_length=512)
    replicas: StrictInt = Field(default=1, ge=0, le=1000)
    gpus_per_replica: StrictInt = Field(default=1, ge=0, le=64)
    tensor_parallel_size: StrictInt = Field(default=1, ge=1, le=64)
    args: tuple[StrictStr, ...] = ()
    node_labels: dict[Name, StrictStr] = Field(default_factory=dict)
    key_file: SecretRef | None = None

    @model_validator(mode="after")
    def _fits(self) -> Deploy:
        if self.model.startswith("-"):
            raise ValueError(
                f"model {self.model!r} begins with '-': the engine would read it as an option"
            )
        if self.gpus_per_replica == 0 and self.engine != "sim":
            raise ValueError(f"gpus_per_replica: 0 is only for engine sim, not {self.engine}")
        if self.gpus_per_replica and self.gpus_per_replica % self.tensor_parallel_size:
            raise ValueError(
                f"gpus_per_replica ({self.gpus_per_replica}) must be a multiple of "
                f"tensor_parallel_size ({self.tensor_parallel_size})"
            )
        if self.gpus_per_replica == 0 and self.tensor_parallel_size != 1:
            raise ValueError("tensor_parallel_size must be 1 without GPUs")
        return self
