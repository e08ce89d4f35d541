"""Request paths reduced to one canonical spelling before any policy looks at them.

The path policy is an allowlist of exact canonical paths, so every way of
spelling a path differently (percent-encoding, nested encoding, ``.`` and
``..``, doubled or trailing slashes, letter case) must collapse to the same
string first, and anything that cannot be reduced safely is refused:

    normalize_path("/V1//Chat/./completions/")   == "/v1/chat/completions"
    normalize_path("/v1/%252e%252e/slots")        == "/slots"       # not allowed anyway
    normalize_path("/v1/..%2fslots")              is None           # encoded slash
    normalize_path("/../slots")                   is None           # above the root

``None`` always means "answer 404". The upstream request is later sent to the
route's canonical path from the allowlist, never to the client's spelling.
"""

from __future__ import annotations

import re

__all__ = ["normalize_path"]

# Nested encodings deeper than this are not produced by any real client.
_MAX_DECODE_ROUNDS = 8
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
# An encoded "/" or "\" would change how the engine splits the path into
# segments, whatever level of encoding it hides behind.
_ENCODED_SEPARATOR = re.compile(rb"%(?:2[fF]|5[cC])")
# After decoding, only printable ASCII without the characters that carry URL
# structure (query, fragment, escapes, backslash) may remain.
_REFUSED = re.compile(r"[^\x21-\x7e]|[?#%\\]")


def _decode_once(raw: bytes) -> bytes:
    return _ESCAPE.sub(lambda m: bytes((int(m.group(1), 16),)), raw)


def _fully_decoded(raw: bytes) -> bytes | None:
    current = raw
    for _ in range(_MAX_DECODE_ROUNDS):
        if _ENCODED_SEPARATOR.search(current):
            return None
        decoded = _decode_once(current)
        if decoded == current:
            return current
        current = decoded
    return None


def _resolve_segments(path: str) -> str | None:
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                return None
            segments.pop()
            continue
        segments.append(segment)
    return "/" + "/".join(segments)


def normalize_path(raw_path: bytes | str) -> str | None:
    """The canonical form of ``raw_path``, or ``None`` when it must be refused.

    Percent-decodes repeatedly until stable (so ``%252e%252e`` is caught),
    requires valid UTF-8 that is plain printable ASCII, lower-cases, collapses
    ``//``, resolves ``.`` and ``..`` (``..`` above the root is refused) and
    strips a trailing slash (``"/"`` stays ``"/"``). Refused: NUL and other
    control characters, spaces, backslashes, ``?``/``#``/``%`` left after
    decoding, encoded ``/`` or ``\\`` at any encoding depth, non-ASCII
    characters, paths not starting with ``/``, and encodings nested deeper
    than 8 levels. A query string must already be split off by the caller.
    """
    raw = raw_path.encode("utf-8", "surrogatepass") if isinstance(raw_path, str) else raw_path
    decoded = _fully_decoded(raw)
    if decoded is None:
        return None
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text.startswith("/") or _REFUSED.search(text):
        return None
    return _resolve_segments(text.lower())
