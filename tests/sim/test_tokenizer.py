"""The stand-in tokenizer: deterministic ids, chat rendering, output that re-tokenizes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fairgate.core.errors import BadRequest
from fairgate.sim.tokenizer import Tokenizer


def test_words_punctuation_and_long_words() -> None:
    tok = Tokenizer()
    assert tok.count("Hello, world!") == 4
    assert tok.count("internationalization") == 4  # runs of at most six characters
    assert tok.count("   ") == 0
    assert len(tok.encode("a b, c")) == tok.count("a b, c")


def test_ids_are_stable_across_processes() -> None:
    code = "from fairgate.sim.tokenizer import Tokenizer; print(Tokenizer().encode('stable ids'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == str(Tokenizer().encode("stable ids"))


def test_chat_rendering_wraps_each_message_and_ends_with_the_assistant() -> None:
    tok = Tokenizer()
    one = tok.chat([{"role": "user", "content": "hi there"}])
    assert len(one) == 2 + 3
    parts = [{"type": "text", "text": "hi there"}]
    assert tok.chat([{"role": "user", "content": parts}]) == one
    image = [{"type": "image_url", "image_url": {"url": "data:..."}}]
    assert len(tok.chat([{"role": "user", "content": image}])) == 16 + 3
    assert len(tok.chat([{"role": "user", "content": "hi"}], extra=["tool spec"])) == 2 + 1 + 3


@pytest.mark.parametrize(
    "messages", [[], "hi", [{"content": "x"}], [{"role": "user", "content": 3}]]
)
def test_malformed_messages_are_bad_requests(messages: object) -> None:
    with pytest.raises(BadRequest):
        Tokenizer().chat(messages)


def test_output_is_n_tokens_that_retokenize_to_the_output_ids() -> None:
    tok = Tokenizer(seed=7)
    text = tok.output_text(40)
    assert tok.count(text) == 40
    assert tok.encode(text) == [tok.output_id(i) for i in range(40)]
    assert "".join(tok.output_piece(i) for i in range(40)) == text
    assert Tokenizer(seed=8).output_text(40) != text
    assert Tokenizer(seed=7).output_text(40) == text
