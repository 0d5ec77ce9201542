"""Request ids: the client's `x-request-id`, or one made here."""

from __future__ import annotations

import itertools
import os


class RequestIds:
    """Unique request ids without a system call per request: a random prefix per handler (so
    per process) and a counter."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"
