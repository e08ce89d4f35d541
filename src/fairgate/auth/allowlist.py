"""Model allowlists of a team and a key, decided per model.

A list names models as configured, by canonical name or by any alias; every
name of a model stands for the whole model, so a list holding ``llama70b``
allows a request for ``llama-3.3-70b`` and the other way round. An absent list
(``None``) allows every model; an empty list allows none. A principal may use
the models both its team's list and its key's list allow:

    team None,            key None        →  None (everything)
    team ["llama70b"],    key None        →  {"llama-3.3-70b"}
    team ["llama70b", "m"], key ["m"]     →  {"m"}
    team [],              key anything    →  frozenset() (nothing)

A model the principal may not use answers exactly like an unknown one (404)
and is left out of ``GET /v1/models``; the proxy asks ``allows``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from fairgate.core.principal import Principal

__all__ = ["ModelResolver", "allowed_models", "allows"]

log = logging.getLogger("fairgate.auth")

ResolveModels = Callable[[Sequence[str]], frozenset[str]]


class ModelResolver:
    """Maps configured model names (canonical or alias) to canonical names.

    Built once from ``{name or alias: canonical name}`` for every configured
    model. A name it does not know (a model removed from the configuration but
    still listed in the store) is left out, with a warning naming it: a list
    holding only unknown names allows nothing, never everything.
    """

    def __init__(self, canonical: Mapping[str, str]) -> None:
        self._canonical = dict(canonical)

    def __call__(self, names: Sequence[str]) -> frozenset[str]:
        found = set()
        for name in names:
            canonical = self._canonical.get(name)
            if canonical is None:
                log.warning("model allowlist names unknown model %r; ignored", name)
            else:
                found.add(canonical)
        return frozenset(found)


def allowed_models(
    team: Sequence[str] | None, key: Sequence[str] | None, resolve: ResolveModels
) -> frozenset[str] | None:
    """Canonical names allowed by both lists, or None when neither restricts."""
    if team is None and key is None:
        return None
    if team is None:
        return resolve(key or ())
    if key is None:
        return resolve(team)
    return resolve(team) & resolve(key)


def allows(principal: Principal, canonical_model: str) -> bool:
    """Whether ``principal`` may use the model called ``canonical_model`` (its canonical name)."""
    return principal.models is None or canonical_model in principal.models
