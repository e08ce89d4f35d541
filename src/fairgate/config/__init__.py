"""The gateway's configuration: one YAML file → a validated, frozen :class:`Config`.

    cfg = load_config("gateway.yaml", env=os.environ)
    cfg.limits.idle_timeout          # 30.0 (seconds; written "30s")
    cfg.model("llama70b").name       # "llama-3.3-70b" (found by alias)
    cfg.models[0].upstreams[0].key_file.read()   # the key, from its file

Every problem is reported at once, each as ``file:line:column: message``:
YAML errors, tags, anchors and duplicate keys (:mod:`.document`), environment
overrides (:mod:`.environment`), schema errors (:mod:`.messages`), cross-entry
rules (:mod:`.rules`) and unreadable secret files (:mod:`.secrets`). The file
cannot read the environment or other files: ``"${HOME}"`` is just a string.

Errors:

    ConfigError            .diagnostics: list[Diagnostic(file, line, column, message)]
    ├── from load_config   the file, its overrides and its secret files
    └── from SecretRef.read  one secret file missing, unreadable or empty

docs/configuration.md describes every key; a test keeps it complete.
"""

from __future__ import annotations

from fairgate.config.catalog import Cost, EngineKind, Model, ModelClass, Org, Pool, Upstream
from fairgate.config.diagnostics import ConfigError, Diagnostic, Mark
from fairgate.config.loader import load_config
from fairgate.config.schema import Config
from fairgate.config.secrets import SecretRef
from fairgate.config.settings import (
    AdminListen,
    Admission,
    Auth,
    Band,
    BreakerSettings,
    CacheIsolation,
    Fairshare,
    Health,
    Landing,
    Limits,
    Listen,
    Logging,
    ProxySettings,
    State,
    Store,
)

__all__ = [
    "AdminListen",
    "Admission",
    "Auth",
    "Band",
    "BreakerSettings",
    "CacheIsolation",
    "Config",
    "ConfigError",
    "Cost",
    "Diagnostic",
    "EngineKind",
    "Fairshare",
    "Health",
    "Landing",
    "Limits",
    "Listen",
    "Logging",
    "Mark",
    "Model",
    "ModelClass",
    "Org",
    "Pool",
    "ProxySettings",
    "SecretRef",
    "State",
    "Store",
    "Upstream",
    "load_config",
]
