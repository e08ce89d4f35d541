"""What routing reads of a request: its session key and its prompt's prefix hashes.

    session, prefix = routing_inputs(ex)
    replica = registry.pick(model, exclude=tried, session=session, prefix=prefix)

The session key is the session header's value when the client sent one
(``routing.session_header``), else the virtual key's id, so a key's requests
share a home replica unless its load bound sends them elsewhere. The prefix
is the prompt as the engine will see it, in order: chat ``messages`` (role and
text of each), a completion's ``prompt`` (text or token ids), or a response's
``instructions`` and ``input``. Only its first ``block_size × max_blocks``
characters are read, and a non-text part (an image, audio) ends it, so the
cost is bounded whatever the body holds. The hashes are salted with the
request's ``cache_salt``: tenants whose engine caches are kept apart never
share a prefix in routing either.
"""

from __future__ import annotations

from typing import Any

from fairgate.proxy.exchange import Exchange
from fairgate.routing import prefix_hashes

__all__ = ["routing_inputs"]

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


def routing_inputs(
    ex: Exchange,
    *,
    prefix: bool = True,
    block_size: int = 256,
    max_blocks: int = 16,
) -> tuple[str | None, tuple[int, ...]]:
    """``(session key, prefix hashes)`` of the request; ``(None, ())`` when there is nothing.

    Read after ``ex.cache_salt`` is set. ``prefix=False`` skips hashing (for a
    strategy without prefix affinity, see ``ReplicaRegistry.uses_prefix``).
    Cost: a few microseconds for a prompt of ``block_size × max_blocks``
    characters or more, nothing for a shorter one.
    """
    principal = ex.principal
    if ex.session:
        session: str | None = ex.session.decode("latin-1")
    else:
        session = principal.key_id if principal is not None else None
    if not prefix or not isinstance(ex.parsed, dict):
        return session, ()
    prompt = _prompt(ex.parsed, ex.endpoint, block_size * max_blocks)
    if not prompt:
        return session, ()
    salt = ex.cache_salt.encode() if ex.cache_salt else b""
    return session, prefix_hashes(prompt, block_size, max_blocks, salt=salt)


def _prompt(parsed: dict[str, Any], route: str, limit: int) -> str | list[int] | None:
    messages = parsed.get("messages")
    if isinstance(messages, list):
        return _conversation(messages, limit)
    prompt = parsed.get("prompt")
    if prompt is not None:
        return _completion_prompt(prompt, limit)
    if route == "/v1/responses":
        items: list[Any] = []
        instructions = parsed.get("instructions")
        if isinstance(instructions, str):
            items.append({"role": "system", "content": instructions})
        given = parsed.get("input")
        if isinstance(given, str):
            items.append({"role": "user", "content": given})
        elif isinstance(given, list):
            items.extend(given)
        return _conversation(items, limit)
    return None


def _completion_prompt(prompt: Any, limit: int) -> str | list[int] | None:
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]  # a batch of prompts: the first is sent first
    if isinstance(prompt, str):
        return prompt[:limit]
    if isinstance(prompt, list):
        head = prompt[:limit]
        if all(isinstance(t, int) and not isinstance(t, bool) for t in head):
            return head
    return None


def _conversation(messages: list[Any], limit: int) -> str:
    """Role and text of each message, in order, up to ``limit`` characters.

    Stops at anything whose text is not in the body as such (an image or
    audio part, tool calls): the engine's prompt past that point is unknown
    here, and two requests differing there must not look alike.
    """
    pieces: list[str] = []
    size = 0
    for message in messages:
        if size >= limit or not isinstance(message, dict) or message.get("tool_calls"):
            break
        role = message.get("role")
        pieces.append(f"<{role}>" if isinstance(role, str) else "<>")
        size += len(pieces[-1])
        content = message.get("content")
        if isinstance(content, str):  # one text part, as most messages are: read as such
            if size >= limit:
                return "".join(pieces)
            pieces.append(content[: limit - size])
            size += len(pieces[-1])
            continue
        if not isinstance(content, list):
            break
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            if size >= limit or not isinstance(text, str) or part.get("type") not in _TEXT_PARTS:
                return "".join(pieces)
            pieces.append(text[: limit - size])
            size += len(pieces[-1])
    return "".join(pieces)
