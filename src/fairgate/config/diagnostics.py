"""Where a configuration problem is, and what it is: ``file:line:column: message``.

A :class:`Mark` is a position (the file, or ``env:FAIRGATE_X__Y`` for an
environment override); a :class:`Diagnostic` is a mark with a message; a
:class:`ConfigError` carries every diagnostic found, so a user fixes them all in
one round instead of one per run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["ConfigError", "Diagnostic", "Mark"]


class Mark(NamedTuple):
    """A position in a configuration source.

    ``line`` and ``column`` are 1-based. Both are 0 when the source has no lines:
    an environment variable (``file`` is then ``env:FAIRGATE_…``) or a file that
    could not be read at all.
    """

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        return f"{self.file}:{self.line}:{self.column}"


class Diagnostic(NamedTuple):
    """One problem in the configuration, written for the operator who must fix it.

    ``str(d)`` is ``file:line:column: message`` (1-based line and column), or
    ``file: message`` when the position has no line (see :class:`Mark`).
    Messages never contain the content of a secret.
    """

    file: str
    line: int
    column: int
    message: str

    @classmethod
    def at(cls, mark: Mark, message: str) -> Diagnostic:
        """The diagnostic at ``mark``; lone surrogates in either text become ``\\udXXX``.

        A YAML or JSON escape (``"\\ud800"``) or an undecodable byte in a file name
        gives a string with a lone surrogate, which no UTF-8 stream can print: the
        message quoting it would turn a configuration error into a crash of the
        command printing it.
        """
        return cls(_printable(mark.file), mark.line, mark.column, _printable(message))

    @property
    def mark(self) -> Mark:
        return Mark(self.file, self.line, self.column)

    def __str__(self) -> str:
        return f"{self.mark}: {self.message}"


def _printable(text: str) -> str:
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class ConfigError(Exception):
    """The configuration cannot be used; ``diagnostics`` lists every reason found.

    Raised by :func:`fairgate.config.load_config` (with all problems of the file,
    its environment overrides and its secret files) and by
    :meth:`fairgate.config.SecretRef.read` (with the one unreadable secret file).
    ``str(error)`` is the diagnostics, one per line.
    """

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))
