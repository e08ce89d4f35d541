"""The tags a request adds through its tag header, parsed in the read stage.

The key's own tags always apply; the header may add tags the configuration
allows (to every organisation, or to the caller's). Budgets scoped to a tag
bind the requests carrying it (``proxy.limit``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from fairgate.core.errors import BadRequest
from fairgate.core.memo import BoundedMemo
from fairgate.core.principal import Principal

__all__ = ["TagPolicy"]

_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}")
_MAX_DECIDED = 4096  # header values remembered at most (all forgotten past that)
_DECIDED_BYTES = 1024  # a longer value is checked each time, never held


@dataclass(frozen=True, slots=True)
class TagPolicy:
    """Tags a request may add through its one tag header (``header``): at most ``limit``,
    each in ``allowed`` (every organisation's) or in ``by_org`` of the caller's
    organisation. Nothing listed: the header may carry no tag."""

    limit: int = 8
    allowed: frozenset[str] = frozenset()
    by_org: Mapping[str, frozenset[str]] = field(default_factory=dict)
    header: str = "x-fairgate-tags"
    # (header value, org, key's tags) → the request's tags: a tenant sends the same few
    # values, so each is parsed and checked once (bounded; a refusal is never kept)
    _decided: BoundedMemo[tuple[bytes, str, tuple[str, ...]], tuple[str, ...]] = field(
        default_factory=lambda: BoundedMemo(
            _MAX_DECIDED, keeps=lambda decision: len(decision[0]) <= _DECIDED_BYTES
        ),
        init=False,
        repr=False,
        compare=False,
    )

    def parse(self, raw: bytes, org: str = "") -> tuple[str, ...]:
        """The header's comma-separated tags, de-duplicated in order; ``BadRequest``
        (400) for too many, a malformed or a tag not allowed to ``org``'s keys."""
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise BadRequest("tags must be ASCII", code="invalid_tag") from None
        tags = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        if len(tags) > self.limit:
            raise BadRequest(
                f"a request may carry at most {self.limit} tags, this one has {len(tags)}",
                code="too_many_tags",
            )
        for tag in tags:
            if not _TAG.fullmatch(tag):
                raise BadRequest(
                    "a tag is 1 to 64 of the characters A-Z a-z 0-9 . _ : / - "
                    "and starts with a letter or digit",
                    code="invalid_tag",
                )
            if tag not in self.allowed and tag not in self.by_org.get(org, ()):
                # the message names the header, never what another tenant may send
                raise BadRequest(
                    f"tag '{tag}' in the {self.header} header is not allowed for this key",
                    code="tag_not_allowed",
                )
        return tags

    def apply(self, principal: Principal, raw: bytes | None) -> tuple[str, ...] | None:
        """The request's tags: the key's and those ``raw`` (the header's value, None when
        absent) adds, de-duplicated in order; None without the header (the key's own
        apply). Refuses as ``parse`` does."""
        if raw is None:
            return None
        decision = (raw, principal.org, principal.tags)
        tags = self._decided.get(decision)
        if tags is None:
            added = self.parse(raw, principal.org)
            tags = self._decided.keep(decision, tuple(dict.fromkeys((*principal.tags, *added))))
        return tags
