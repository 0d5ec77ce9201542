"""A manual clock for the reliability tests (time moves only when a test says so), and a
breaker failed until it opens."""

from __future__ import annotations

from router.execution.breaker import BreakerPolicy, CircuitBreaker


class FakeClock:
    """A monotonic clock that starts at `start` and advances by `advance(seconds)`."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def fail_until_open(breaker: CircuitBreaker) -> None:
    """A breaker of the default `BreakerPolicy`, failed by as many admitted attempts in a row
    as open it."""
    for _ in range(BreakerPolicy().consecutive_failures):
        permit = breaker.allow()
        assert permit is not None
        breaker.on_failure(permit)
