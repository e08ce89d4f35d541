"""What the gateway serves and to whom: pools, organisations, models and their upstreams.

Each class checks its own values; the rules that relate entries to each other
(unique names, known pools and fallbacks, share sum) live in
:mod:`fairgate.config.rules`, which sees the whole file.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Field,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from fairgate.config.fields import (
    Count,
    Name,
    NonNegativeDuration,
    Section,
    describe,
    normalise_upstream_url,
)
from fairgate.config.fleet import Deploy
from fairgate.config.request_policy import RequestPolicySettings
from fairgate.config.secrets import SecretRef
from fairgate.routing import strategy_for

__all__ = [
    "AUTO",
    "MAX_CAPACITY",
    "Cost",
    "EngineKind",
    "Model",
    "ModelClass",
    "Org",
    "Pool",
    "TeamShare",
    "Upstream",
]

MAX_CAPACITY = 100_000
"""Upper bound of a pool's capacity (concurrent requests)."""

AUTO = "auto"
"""``pools[].capacity: auto``: C learned from the engines."""

EngineKind = Literal["vllm", "llama-server", "openai"]
ModelClass = Literal["interactive", "batch"]


def _capacity(value: Any) -> Any:
    if value == AUTO:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer or '{AUTO}', got {describe(value)}")
    if not 1 <= value <= MAX_CAPACITY:
        bound = "at least 1" if value < 1 else f"at most {MAX_CAPACITY}"
        raise ValueError(f"must be {bound}, got {value}")
    return value


class Pool(Section):
    """A pool of GPU capacity shared by models: ``capacity`` concurrent requests, 1..100000,
    or ``auto``: learned from the engines' metrics within ``capacity_min`` and
    ``capacity_max`` (both required then), with ``capacity_kv_limit`` (KV use above
    which a reading shows the pool over what it sustains, default 0.9) and
    ``capacity_rise_after`` (how long evidence must last before C rises, default 10 s).
    The four ``capacity_*`` keys are refused with a fixed capacity."""

    name: Name
    capacity: Annotated[int | Literal["auto"], BeforeValidator(_capacity)]
    capacity_min: StrictInt | None = Field(
        default=None, ge=1, le=MAX_CAPACITY, validate_default=True
    )
    capacity_max: StrictInt | None = Field(
        default=None, ge=1, le=MAX_CAPACITY, validate_default=True
    )
    capacity_kv_limit: StrictFloat | None = Field(default=None, gt=0, le=1)
    capacity_rise_after: NonNegativeDuration | None = None

    @field_validator("capacity_min", "capacity_max", "capacity_kv_limit", "capacity_rise_after")
    @classmethod
    def _only_when_learned(cls, value: Any, info: ValidationInfo) -> Any:
        capacity = info.data.get("capacity")
        bounds = info.field_name in ("capacity_min", "capacity_max")
        if capacity == AUTO and bounds and value is None:
            raise ValueError(f"required with capacity: {AUTO} (the floor and ceiling of C)")
        if capacity != AUTO and capacity is not None and value is not None:
            raise ValueError(f"only with capacity: {AUTO}, not with a fixed capacity")
        low = info.data.get("capacity_min")
        if info.field_name == "capacity_max" and None not in (value, low) and value < low:
            raise ValueError(f"must be at least capacity_min ({low}), got {value}")
        return value

    @property
    def learned(self) -> bool:
        """True when C is learned from the engines (``capacity: auto``)."""
        return self.capacity == AUTO

    @property
    def start(self) -> int:
        """C before anything is learned: the fixed capacity, or the floor."""
        if isinstance(self.capacity, int):
            return self.capacity
        assert self.capacity_min is not None  # required with auto
        return self.capacity_min


class TeamShare(Section):
    """A team of an organisation: a bare name, or ``{name, share}`` for a team with a
    sub-share: ``share`` in (0, 1] is a fraction of its organisation's share (the teams of
    one organisation sum to at most 1)."""

    name: Name
    share: StrictFloat | None = Field(default=None, gt=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data


class Org(Section):
    """An organisation: its ``share`` of every pool, in (0, 1], its teams (a name, or
    ``{name, share}`` for a team with a sub-share of the organisation's), and the ``tags``
    its keys may add to a request in the tag header (besides ``tags.allowed``)."""

    name: Name
    share: StrictFloat = Field(gt=0, le=1)
    team_entries: tuple[TeamShare, ...] = Field(default=(), alias="teams")
    tags: tuple[Name, ...] = ()

    @property
    def teams(self) -> tuple[str, ...]:
        """The names of the organisation's teams, with a sub-share or not."""
        return tuple(t.name for t in self.team_entries)

    @property
    def team_shares(self) -> dict[str, float]:
        """The sub-share of each team that has one."""
        return {t.name: t.share for t in self.team_entries if t.share is not None}


class Cost(Section):
    """Prices in GPU-hours per million tokens (input, output, cached input), each >= 0."""

    input_per_mtok: StrictFloat = Field(default=0.0, ge=0)
    output_per_mtok: StrictFloat = Field(default=0.0, ge=0)
    cached_per_mtok: StrictFloat = Field(default=0.0, ge=0)


class Upstream(Section):
    """One engine replica serving a model.

    ``url`` is http(s) without credentials, query or fragment, stored with a
    lower-case scheme and host and no trailing slash; ``key_file`` holds the
    engine's API key; ``weight`` (1..1000) is its relative share of traffic.
    """

    name: Name
    url: str
    key_file: SecretRef | None = None
    weight: StrictInt = Field(default=1, ge=1, le=1000)

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        return normalise_upstream_url(value)


class Model(Section):
    """A model clients may ask for, by ``name`` or any of its ``aliases``.

    ``upstream_model`` is the name sent to the engine (defaults to ``name``);
    ``pool`` names a pool (required when pools are declared); ``model_class``
    (YAML key ``class``) sets the priority class; ``fallbacks`` are tried in
    order when no upstream can serve, before anything reached the client.
    ``routing`` is a preset's name (``chat``, ``batch``, ``long-context``) or a
    ``{filters, scorers, picker}`` specification; it is built here, so an
    unknown plugin or a bad parameter is a configuration error. ``max_tokens``
    is the largest output cap a request to this model may ask for (with
    ``limits.max_tokens``, the smaller counts). ``request_policy`` changes the
    engine kind's default request policy (``config.request_policy``).
    A model has either ``upstreams`` (static replicas) or ``deploy`` (replicas the
    control plane places on the fleet's nodes, ``fairgate.config.fleet.Deploy``).
    """

    name: Name
    aliases: tuple[Name, ...] = ()
    upstream_model: Name
    engine: EngineKind = "vllm"
    pool: Name | None = None
    model_class: ModelClass = Field(default="interactive", alias="class")
    fallbacks: tuple[Name, ...] = ()
    cost: Cost = Field(default_factory=Cost)
    max_tokens: Count | None = None
    routing: str | dict[str, Any] = "chat"
    request_policy: RequestPolicySettings = Field(default_factory=RequestPolicySettings)
    upstreams: tuple[Upstream, ...] = ()
    deploy: Deploy | None = None

    @model_validator(mode="after")
    def _upstreams_or_deploy(self) -> Model:
        if self.deploy is not None and self.upstreams:
            raise ValueError("give either upstreams or deploy, not both")
        if self.deploy is None and not self.upstreams:
            raise ValueError("give upstreams (at least one) or deploy")
        if self.deploy is not None and self.upstream_model.startswith("-"):
            raise ValueError(
                f"upstream_model {self.upstream_model!r} begins with '-': the deployed "
                "engine would read its served name as an option"
            )
        return self

    @field_validator("routing", mode="before")
    @classmethod
    def _valid_routing(cls, value: Any) -> Any:
        if not isinstance(value, str | dict):
            raise ValueError(f"expected a preset name or a mapping, got {describe(value)}")
        strategy_for(value)  # raises ValueError naming the preset, plugin or parameter
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_upstream_model(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "upstream_model" not in data
            and isinstance(data.get("name"), str)
        ):
            return {**data, "upstream_model": data["name"]}
        return data
