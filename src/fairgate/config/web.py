"""The ``web:`` section: the server-rendered pages of the client listener (``fairgate.web``).

web:
  enabled: true              # false: every path goes to the OpenAI API, as before
  max_form_bytes: 16384      # a larger form body is refused with 413
"""

from __future__ import annotations

from pydantic import Field, StrictBool, StrictInt

from fairgate.config.fields import Section

__all__ = ["Web"]


class Web(Section):
    """The web pages: ``enabled`` mounts them on the client listener; ``max_form_bytes``
    bounds one form's body (bytes, 1 KiB..1 MiB)."""

    enabled: StrictBool = True
    max_form_bytes: StrictInt = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
