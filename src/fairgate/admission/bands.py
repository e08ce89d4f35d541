"""Priority bands: a name, a saturation ceiling, and a rank (0 = the top band).

A band is admitted while the pool's saturation is below its ceiling, so the
cluster degrades from the bottom up: with ``platinum 1.5, gold 1.0, bronze 0.8``
bronze is held back first (at 0.8), gold at 1.0 (the engines' batches are full),
and platinum never (a ceiling above 1.0 means "never held back": such a band
skips the queue altogether). A ceiling of exactly 1.0 is not "never held": it
means "flow up to the healthy limit".

The band of a request comes from its key's team (``teams``) or the default
band, never from anything the client sends.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["NEVER_HELD_ABOVE", "Band", "Bands"]

NEVER_HELD_ABOVE = 1.0
"""A band whose ceiling is above this is never held back and never queued."""


@dataclass(frozen=True, slots=True)
class Band:
    """One priority band: admitted while saturation < ``ceiling`` (> 0); ``rank`` 0 is the top."""

    name: str
    ceiling: float
    rank: int
    never_held: bool = field(init=False, repr=False, compare=False)
    """True when the ceiling is above 1.0: the band is admitted whatever the saturation
    (derived once: read twice a request)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "never_held", self.ceiling > NEVER_HELD_ABOVE)


class Bands:
    """The configured bands, from the top, with the default band and the team → band map.

    ``entries`` are ``(name, ceiling)`` pairs listed from the top band down;
    names are unique and each ceiling is finite, > 0 and at most the one above
    it (a lower band never flows where a higher one is held). ``default`` names
    the band of a team without one (the lowest band when ``None``); ``teams``
    maps team names to band names. Raises ``ValueError`` on any violation.
    Lookups are O(1).
    """

    def __init__(
        self,
        entries: Sequence[tuple[str, float]],
        *,
        default: str | None = None,
        teams: Mapping[str, str] | None = None,
    ) -> None:
        if not entries:
            raise ValueError("at least one band is needed")
        bands: dict[str, Band] = {}
        above = math.inf
        for rank, (name, ceiling) in enumerate(entries):
            if name in bands:
                raise ValueError(f"duplicate band name {name!r}")
            if not (math.isfinite(ceiling) and ceiling > 0):
                raise ValueError(f"band {name!r}: ceiling must be a finite number > 0")
            if ceiling > above:
                raise ValueError(
                    f"band {name!r}: ceiling {ceiling} is above the ceiling of the band above it"
                )
            above = ceiling
            bands[name] = Band(name, float(ceiling), rank)
        self._bands = bands
        self._ranked = tuple(bands.values())
        self._default = self._ranked[-1] if default is None else self._lookup(default)
        team_map = dict(teams or {})
        for team, band in team_map.items():
            self._lookup(band, f"team {team!r}: ")
        self._teams = MappingProxyType({team: bands[b] for team, b in team_map.items()})

    def _lookup(self, name: str, context: str = "") -> Band:
        band = self._bands.get(name)
        if band is None:
            known = ", ".join(self._bands)
            raise ValueError(f"{context}unknown band {name!r} (known: {known})")
        return band

    def get(self, name: str) -> Band:
        """The band called ``name``; ``KeyError`` when there is none."""
        return self._bands[name]

    def __contains__(self, name: object) -> bool:
        return name in self._bands

    @property
    def default(self) -> Band:
        """The band of a team that has none of its own."""
        return self._default

    def for_team(self, team: str) -> Band:
        """The band of ``team``: its own, else the default band."""
        return self._teams.get(team, self._default)

    def __iter__(self) -> Iterator[Band]:
        """The bands from the top (rank 0) down."""
        return iter(self._ranked)

    def __len__(self) -> int:
        return len(self._ranked)

    def __repr__(self) -> str:
        inner = ", ".join(f"{b.name}={b.ceiling:g}" for b in self._ranked)
        return f"Bands({inner}; default={self._default.name})"
