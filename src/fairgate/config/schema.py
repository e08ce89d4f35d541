"""The whole configuration, :class:`Config`, and the walk over its schema used by messages and docs.

Sections a file leaves out take their defaults; only ``models`` is required.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Field, PrivateAttr, field_validator

from fairgate.config.catalog import Model, Org, Pool
from fairgate.config.document import Loc
from fairgate.config.fields import NonEmpty, PublicUrl, Section
from fairgate.config.fleet import ControlPlane
from fairgate.config.jwt import Jwt
from fairgate.config.network import Cidr, Routes
from fairgate.config.scim import Scim
from fairgate.config.secrets import SecretRef
from fairgate.config.settings import (
    Accounting,
    AdminListen,
    Admission,
    Alerts,
    Auth,
    BreakerSettings,
    CacheIsolation,
    Fairshare,
    Health,
    Landing,
    Limits,
    Listen,
    Logging,
    ProxySettings,
    Routing,
    State,
    Store,
    Tags,
)
from fairgate.config.sso import Sso
from fairgate.config.vault import VaultSettings
from fairgate.config.web import Web
from fairgate.config.web_accounts import WebAccounts

__all__ = ["Config", "FieldKind", "field_kind", "keys_of", "model_at"]

FieldKind = Literal["scalar", "section", "list"]


class Config(Section):
    """A validated, frozen gateway configuration (every duration in float seconds).

    Built by :func:`fairgate.config.load_config`, which fills ``path`` with the
    file it came from; the YAML file itself has no ``path`` key. Names are
    unique, references (pools, fallbacks) resolve and secret files exist;
    ``Model.fallbacks`` hold canonical model names even where the file wrote an
    alias.
    """

    path: Path
    listen: Listen = Field(default_factory=Listen)
    admin_listen: AdminListen = Field(default_factory=AdminListen)
    master_key_file: SecretRef | None = None
    store: Store = Field(default_factory=Store)
    state: State = Field(default_factory=State)
    limits: Limits = Field(default_factory=Limits)
    proxy: ProxySettings = Field(default_factory=ProxySettings)
    health: Health = Field(default_factory=Health)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    logging: Logging = Field(default_factory=Logging)
    fairshare: Fairshare = Field(default_factory=Fairshare)
    admission: Admission = Field(default_factory=Admission)
    cache_isolation: CacheIsolation = Field(default_factory=CacheIsolation)
    auth: Auth = Field(default_factory=Auth)
    routing: Routing = Field(default_factory=Routing)
    tags: Tags = Field(default_factory=Tags)
    alerts: Alerts = Field(default_factory=Alerts)
    accounting: Accounting = Field(default_factory=dict, validate_default=True)
    landing: Landing = Field(default_factory=Landing)
    web: Web = Field(default_factory=Web)
    public_url: PublicUrl | None = None
    accounts: WebAccounts = Field(default_factory=WebAccounts)
    vault: VaultSettings | None = None
    jwt: Jwt | None = None
    sso: Sso | None = None
    scim: Scim | None = None
    control_plane: ControlPlane | None = None
    trusted_proxies: tuple[Cidr, ...] = ()
    routes: Routes = Field(default_factory=Routes)
    metrics_token_file: SecretRef | None = None
    pools: tuple[Pool, ...] = ()
    orgs: tuple[Org, ...] = ()
    models: Annotated[tuple[Model, ...], NonEmpty]

    _models_by_name: dict[str, Model] = PrivateAttr(default_factory=dict)
    _pools_by_name: dict[str, Pool] = PrivateAttr(default_factory=dict)

    @field_validator("models")
    @classmethod
    def _canonical_fallbacks(cls, models: tuple[Model, ...]) -> tuple[Model, ...]:
        """Fallbacks written as aliases become canonical names, so consumers need no lookup."""
        canonical = {alias: m.name for m in models for alias in (*m.aliases, m.name)}
        return tuple(
            m.model_copy(update={"fallbacks": tuple(canonical.get(f, f) for f in m.fallbacks)})
            if any(canonical.get(f, f) != f for f in m.fallbacks)
            else m
            for m in models
        )

    def model_post_init(self, context: Any, /) -> None:
        for model in self.models:
            for name in (model.name, *model.aliases):
                self._models_by_name.setdefault(name, model)
        for pool in self.pools:
            self._pools_by_name.setdefault(pool.name, pool)

    def model(self, name: str) -> Model | None:
        """The model called ``name`` (its canonical name or any alias), or None."""
        return self._models_by_name.get(name)

    def pool(self, name: str) -> Pool | None:
        """The pool called ``name``, or None."""
        return self._pools_by_name.get(name)


def _unwrap(annotation: Any) -> Any:
    """``X`` from ``X | None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _is_section(annotation: Any) -> bool:
    return (
        isinstance(annotation, type)
        and issubclass(annotation, BaseModel)
        and not issubclass(annotation, SecretRef)
    )


def field_kind(annotation: Any) -> tuple[FieldKind, type[BaseModel] | None]:
    """Whether a field holds a scalar, a section (its model) or a list (its item model, if any)."""
    inner = _unwrap(annotation)
    if get_origin(inner) is tuple:
        item = _unwrap(get_args(inner)[0])
        return "list", item if _is_section(item) else None
    if _is_section(inner):
        return "section", inner
    return "scalar", None


def keys_of(model: type[BaseModel]) -> dict[str, Any]:
    """The YAML keys of ``model`` mapped to their annotations (``path`` of Config excluded)."""
    keys = {}
    for name, info in model.model_fields.items():
        if model is Config and name == "path":
            continue
        keys[info.alias or name] = info.annotation
    return keys


def model_at(loc: Loc) -> type[BaseModel] | None:
    """The schema model of the mapping found at ``loc`` in a configuration tree, if any."""
    current: type[BaseModel] | None = Config
    pending_list = False
    for step in loc:
        if current is None:
            return None
        if pending_list:
            if not isinstance(step, int):
                return None
            pending_list = False
            continue
        if not isinstance(step, str) or step not in keys_of(current):
            return None
        kind, current = field_kind(keys_of(current)[step])
        pending_list = kind == "list"
    return None if pending_list else current
