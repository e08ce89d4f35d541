"""A deterministic stand-in tokenizer and the text the simulator "generates".

A token is a run of at most six word characters or one punctuation mark;
whitespace separates tokens and is not one. Ids come from CRC-32, so the same
text gives the same ids in every process and on every machine:

    Tokenizer().count("Hello, world!") == 4        # Hello , world !

Chat messages render as ``<role> content <end>`` per message followed by
``<assistant>``, the way a chat template adds a generation prompt. The output is
a fixed word sequence chosen by the seed; its pieces re-tokenize to the same ids,
so a later turn that quotes an answer hits the blocks the answer filled.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping

from fairgate.core.errors import BadRequest

__all__ = ["Tokenizer"]

_TOKEN = re.compile(r"\w{1,6}|[^\w\s]")
_ROLES = {"system": 1, "developer": 1, "user": 2, "assistant": 3, "tool": 4, "function": 4}
_OTHER_ROLE = 5
_END = 6
_FIRST_ID = 256
_VOCAB = 50_000
_MEDIA_TOKENS = 16
_TEXT_PARTS = ("text", "input_text", "output_text")
_WORDS = tuple(
    " ".join(
        (
            "the a of to and in is it that for on with as was at by be this from or an are not",
            "but have they which one you were her all she there would their we him been has when",
            "who will more no if out so said what up its about into than them can only other new",
            "some could time these two may then do first any my now such like our over man me",
            "even most made after also did many before must back years where much your way well",
            "down should each just those people how too little state good very make world still",
            "own see men work long get here both life being under never day same know while last",
            "might us great old year off come",
        )
    ).split()
)


class Tokenizer:
    """Text → token ids, and the simulator's output pieces.

    Contract: ``encode`` and ``count`` agree (``len(encode(t)) == count(t)``);
    ``output_text(n)`` is exactly ``n`` tokens; bodies of the wrong shape raise
    ``BadRequest``. With ``exact=False`` every id is 0 and only lengths are
    right, which is all ``--speed 0`` needs and half the cost. Instances cache
    output pieces and are not thread-safe.
    """

    def __init__(self, seed: int = 0, *, exact: bool = True) -> None:
        self.seed = seed
        self.exact = exact
        self._pieces: list[str] = []
        self._ids: list[int] = []
        self._texts: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        tokens = _TOKEN.findall(text)
        if not self.exact:
            return [0] * len(tokens)
        return [zlib.crc32(t.encode()) % _VOCAB + _FIRST_ID for t in tokens]

    def count(self, text: str) -> int:
        return len(_TOKEN.findall(text))

    def chat(self, messages: object, extra: Iterable[str] = ()) -> list[int]:
        """Token ids of a chat prompt; ``extra`` are texts such as serialized tools."""
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        ids: list[int] = []
        for text in extra:
            ids.extend(self.encode(text))
        for message in messages:
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise BadRequest("each message must be an object with a string 'role'")
            ids.append(_ROLES.get(message["role"], _OTHER_ROLE))
            ids.extend(self.content(message.get("content")))
            ids.append(_END)
        ids.append(_ROLES["assistant"])
        return ids

    def content(self, content: object) -> list[int]:
        """Ids of a message's content: a string, a list of parts, or nothing."""
        if content is None:
            return []
        if isinstance(content, str):
            return self.encode(content)
        if not isinstance(content, list):
            raise BadRequest("message content must be a string or a list of parts")
        ids: list[int] = []
        for part in content:
            if not isinstance(part, Mapping):
                raise BadRequest("each content part must be an object")
            if part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
                ids.extend(self.encode(part["text"]))
            else:
                # Images, audio and files: a fixed number of placeholder tokens, as a
                # multimodal processor expands each item into a known token count.
                seed = zlib.crc32(repr(sorted(part.items())).encode())
                ids.extend((seed + i) % _VOCAB + _FIRST_ID for i in range(_MEDIA_TOKENS))
        return ids

    def output_piece(self, index: int) -> str:
        """The text of output token ``index`` (a space before every word but the first)."""
        self._grow(index + 1)
        return self._pieces[index]

    def output_id(self, index: int) -> int:
        self._grow(index + 1)
        return self._ids[index]

    def output_text(self, count: int) -> str:
        text = self._texts.get(count)
        if text is None:
            self._grow(count)
            text = "".join(self._pieces[:count])
            if len(self._texts) < 4096:
                self._texts[count] = text
        return text

    def _grow(self, count: int) -> None:
        for i in range(len(self._pieces), count):
            word = _WORDS[zlib.crc32(f"{self.seed}:{i}".encode()) % len(_WORDS)]
            self._pieces.append(word if i == 0 else " " + word)
            self._ids.append(zlib.crc32(word.encode()) % _VOCAB + _FIRST_ID)
