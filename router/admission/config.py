"""Admission parameters: priority classes, their limits, and the priority header.

Plain frozen values with defaults; the YAML/pydantic loading of runtime configuration builds an
`AdmissionPolicy` from these fields. No behaviour beyond validation and header parsing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from router.errors import RequestError, shown

Priority = Literal["interactive", "background"]
PRIORITIES: Final[tuple[Priority, ...]] = get_args(Priority)
PRIORITY_HEADER: Final = "x-slorouter-priority"


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """One priority class: concurrent requests, queue length, the longest wait in queue, and
    (optionally) how many of them one tenant may have.

    `retry_after_*` clamp the `Retry-After` given on rejection; `initial_hold_s` seeds the
    moving average of how long a request holds its slot (used to estimate that wait).
    """

    max_concurrency: int
    max_queue: int
    max_queue_wait_s: float
    # The most requests one tenant may have running or queued in the class (None: no cap, only
    # the fair share among queued requests): long streams of one tenant cannot hold every slot.
    max_concurrency_per_tenant: int | None = None
    retry_after_min_s: float = 1.0
    retry_after_max_s: float = 30.0
    initial_hold_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_concurrency < 1 or self.max_queue < 0:
            raise ValueError("max_concurrency must be >= 1 and max_queue >= 0")
        if self.max_concurrency_per_tenant is not None and self.max_concurrency_per_tenant < 1:
            raise ValueError("max_concurrency_per_tenant must be >= 1")
        if self.max_queue_wait_s < 0 or self.retry_after_min_s < 0:
            raise ValueError("max_queue_wait_s and retry_after_min_s must be >= 0")
        if self.retry_after_max_s < self.retry_after_min_s:
            raise ValueError("retry_after_max_s must be >= retry_after_min_s")


def _default_pools() -> dict[Priority, PoolLimits]:
    return {
        "interactive": PoolLimits(max_concurrency=64, max_queue=128, max_queue_wait_s=2.0),
        "background": PoolLimits(max_concurrency=16, max_queue=256, max_queue_wait_s=30.0),
    }


@dataclass(frozen=True, slots=True)
class AdmissionPolicy:
    """Limits per priority class. Fair share among tenants is computed per class."""

    pools: dict[Priority, PoolLimits] = field(default_factory=_default_pools)

    def __post_init__(self) -> None:
        missing = [p for p in PRIORITIES if p not in self.pools]
        if missing:
            raise ValueError(f"admission policy misses priority classes: {missing}")


def parse_priority(value: str | None) -> Priority:
    """The priority from the `x-slorouter-priority` header; absent means interactive."""
    if value is None or not value.strip():
        return "interactive"
    normalized = value.strip().lower()
    for priority in PRIORITIES:
        if normalized == priority:
            return priority
    raise RequestError(
        f"{PRIORITY_HEADER} must be one of {', '.join(PRIORITIES)}, got {shown(value)!r}",
        param=PRIORITY_HEADER,
        code="invalid_priority",
    )
