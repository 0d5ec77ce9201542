"""The bytes of request bodies being read and routed at once, bounded.

Bodies are read before admission, so that a slow upload holds no admission slot; nothing else
bounds how many are in memory at once, and a parsed body costs about three times its size (the
memory audit: 40 concurrent 3.5 MB uploads raised RSS by 270 MB, and the process kept the peak).
A request whose body would take the total past `server.max_body_bytes_in_flight` is refused
before its body is read (503 `bodies_over_budget`). Its reservation lasts until the request ends:
the parsed body lives that long.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from router.errors import OverloadedError


class BodyBudget:
    def __init__(self, limit_bytes: int, max_body_bytes: int) -> None:
        self._limit = limit_bytes
        self._max_body = max_body_bytes
        self.held = 0  # bytes reserved by requests in flight

    def size_of(self, headers: Mapping[str, str]) -> int:
        """What a request's body is counted at: its declared length (a larger one is refused
        with 413 when read), else, chunked, the largest a body may be."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit():
            return min(int(declared), self._max_body)
        return self._max_body

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
