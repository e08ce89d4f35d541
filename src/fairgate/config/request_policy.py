"""``models[].request_policy``: an operator's change to the engine kind's request policy.

The defaults of each kind live with the engine adapters (``engines.policy``);
this section only says what differs for one model:

    request_policy:
      deny: [logit_bias]            # refused on top of the kind's defaults
      allow: [chat_template]        # a default denial (or cap) lifted
      caps: {n: 2, top_logprobs: 5} # numeric maximums, replacing the defaults
      max_bytes: {tools: 16384}     # size bounds in bytes, replacing the defaults

Field names are plain JSON keys (letters, digits, ``_``, ``-``, ``.``); a name may
not be both denied and allowed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictInt, model_validator

from fairgate.config.fields import Section, Size

__all__ = ["RequestPolicySettings"]

_FIELD = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _field_name(value: str) -> str:
    if not _FIELD.fullmatch(value):
        raise ValueError(f"not a request field name: {value[:64]!r}")
    return value


FieldName = Annotated[str, AfterValidator(_field_name)]


class RequestPolicySettings(Section):
    """Per-model changes to the engine kind's request policy: ``deny`` extends the denied
    fields, ``allow`` lifts a default denial, cap or bound, ``caps`` (number ≥ 0) and
    ``max_bytes`` (size ≥ 1) set the bound of each field they name."""

    deny: tuple[FieldName, ...] = ()
    allow: tuple[FieldName, ...] = ()
    caps: dict[FieldName, Annotated[StrictInt, Field(ge=0)]] = Field(default_factory=dict)
    max_bytes: dict[FieldName, Size] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _deny_or_allow(self) -> Any:
        both = sorted(set(self.deny) & set(self.allow))
        if both:
            raise ValueError(f"denied and allowed at once: {', '.join(both)}")
        return self
