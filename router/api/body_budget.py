"""The bytes of request bodies being parsed and routed at once, bounded.

Bodies are read before admission, so that a slow upload holds no admission slot; nothing else
bounds how many are in memory at once, and a parsed body costs about three times its size (the
memory audit: 40 concurrent 3.5 MB uploads raised RSS by 270 MB, and the process kept the peak).
A body that has arrived whole is counted at its size before it is parsed; one that would take
the total past `server.max_body_bytes_in_flight` is refused (503 `bodies_over_budget`) unparsed.
Its reservation lasts until the request ends: the parsed body lives that long. A body still
arriving holds nothing: counted at its declared size from the start, connections that sent
headers and no body held the whole budget until their read timed out, for every tenant (the
re-audit).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from router.errors import OverloadedError


class BodyBudget:
    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self.held = 0  # bytes reserved by requests in flight

    @contextlib.contextmanager
    def reserve(self, size: int) -> Iterator[None]:
        if self.held + size > self._limit:
            raise OverloadedError(
                "too many large request bodies are being handled at once; retry shortly",
                code="bodies_over_budget", retry_after=1.0)
        self.held += size
        try:
            yield
        finally:
            self.held -= size
