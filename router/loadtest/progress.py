"""Progress of a long run on stderr: on a terminal one line redrawn in place, fitted to its
width; anywhere else (a pipe, a file, a CI log) a plain line every `every_s` seconds and one at
the end, so that a log holds a few readable lines rather than hundreds of redraws."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TextIO

BAR_WIDTH = 30
MIN_BAR_WIDTH = 10


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 every_s: float = 10.0, columns: int | None = None) -> None:
        self._total = max(1, total)
        self._label = label
        self._stream = stream if stream is not None else sys.stderr
        self._interactive = _is_terminal(self._stream)
        self._columns = columns if columns is not None else _columns(self._stream)
        self._every_s = every_s
        self._next_plain_s = 0.0
        self._unwritten: str | None = None  # the latest line, until it is written (plain)

    def line(self, sent: int, done: int, errors: int, elapsed_s: float) -> str:
        """The progress as one line of at most the terminal's width less one (a line as wide
        as the terminal wraps on some): the bar narrows first, then goes, then the tail is cut."""
        counts = (f"{done}/{self._total} done, {sent} sent, {errors} errors, "
                  f"{elapsed_s:5.1f}s")
        room = self._columns - 1
        width = min(BAR_WIDTH, room - len(self._label) - len(counts) - 4)
        if width < MIN_BAR_WIDTH:
            return f"{self._label} {counts}"[:room]
        filled = int(width * min(done, self._total) / self._total)
        return f"{self._label} [{'#' * filled}{'-' * (width - filled)}] {counts}"

    def update(self, sent: int, done: int, errors: int, elapsed_s: float) -> None:
        line = self.line(sent, done, errors, elapsed_s)
        if self._interactive:
            self._stream.write("\r\x1b[K" + line)
        elif elapsed_s >= self._next_plain_s:
            self._next_plain_s = elapsed_s + self._every_s
            self._stream.write(line + "\n")
            self._unwritten = None
        else:
            self._unwritten = line
            return
        self._stream.flush()

    def close(self) -> None:
        """End the display: the terminal's line is left as it stands; elsewhere the last
        progress is written unless it already was."""
        if self._interactive:
            self._stream.write("\n")
        elif self._unwritten is not None:
            self._stream.write(self._unwritten + "\n")
        self._stream.flush()


def _columns(stream: TextIO) -> int:
    """The width of the terminal `stream` writes to (stderr's own, which may differ from
    stdout's when one of them is piped), else `$COLUMNS` or 80 (a pseudo-terminal may report
    a width of 0)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no fileno, closed, or not a terminal
        columns = 0
    return columns if columns > 0 else shutil.get_terminal_size().columns  # 0: size unknown


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed stream, or one without the method
        return False
