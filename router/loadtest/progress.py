"""A one-line progress display on stderr for long runs (no dependency, redrawn in place)."""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 width: int = 30) -> None:
        self._total = max(1, total)
        self._label = label
        self._stream = stream if stream is not None else sys.stderr
        self._width = width

    def line(self, sent: int, done: int, errors: int, elapsed_s: float) -> str:
        filled = int(self._width * done / self._total)
        bar = "#" * filled + "-" * (self._width - filled)
        return (f"\r{self._label} [{bar}] {done}/{self._total} done, {sent} sent, "
                f"{errors} errors, {elapsed_s:5.1f}s")

    def update(self, sent: int, done: int, errors: int, elapsed_s: float) -> None:
        self._stream.write(self.line(sent, done, errors, elapsed_s))
        self._stream.flush()

    def close(self) -> None:
        self._stream.write("\n")
        self._stream.flush()
