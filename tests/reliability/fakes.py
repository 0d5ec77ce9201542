"""A manual clock for the reliability tests: time moves only when a test says so."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that starts at `start` and advances by `advance(seconds)`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
