"""What the pages show from the configuration, read once at start."""

from __future__ import annotations

from dataclasses import dataclass

from fairgate.config import Config
from fairgate.web.contact import Contact, contact_of

__all__ = ["ModelEntry", "Site"]


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """A model a caller may name: its canonical name and its aliases."""

    name: str
    aliases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Site:
    """The configuration as the pages need it.

    ``public_url`` is the gateway's address for callers (None: taken from each
    request); ``max_form_bytes`` bounds one form's body.
    """

    name: str
    models: tuple[ModelEntry, ...]
    contact: Contact | None
    public_url: str | None
    max_form_bytes: int

    @classmethod
    def of(cls, config: Config) -> Site:
        return cls(
            name="fairgate",
            models=tuple(ModelEntry(m.name, tuple(m.aliases)) for m in config.models),
            contact=contact_of(config.landing.contact),
            public_url=config.public_url,
            max_form_bytes=config.web.max_form_bytes,
        )

    @property
    def example_model(self) -> str:
        """The model the copy-paste examples name."""
        return self.models[0].name if self.models else "MODEL"
