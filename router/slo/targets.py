"""Per-task SLO targets: the plain value that the policy loader builds and everyone reads.

Latency targets are on fixed percentiles (DESIGN.md): TTFT p95, TPOT p95, E2E p99; a target of
None is not tracked. `availability` is the target share of requests answered without error.
Each target is an objective on a share of good events: TTFT at p95 means 95% of requests have
TTFT at or below the target, so the error budget is the remaining 5%.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Sli = Literal["ttft", "tpot", "e2e", "availability"]
SLIS: Final[tuple[Sli, ...]] = ("ttft", "tpot", "e2e", "availability")
TTFT_Q: Final = 0.95
TPOT_Q: Final = 0.95
E2E_Q: Final = 0.99


@dataclass(frozen=True, slots=True)
class SloTargets:
    """One task's SLO: latency targets in seconds at fixed percentiles, and availability."""

    ttft_p95_s: float | None = None
    tpot_p95_s: float | None = None
    e2e_p99_s: float | None = None
    availability: float = 0.995

    def __post_init__(self) -> None:
        if not 0.0 < self.availability < 1.0:
            raise ValueError("availability must be in (0, 1)")

    def objective(self, sli: Sli) -> float | None:
        """The target share of good events for `sli`, or None when that SLI is not tracked."""
        if sli == "ttft":
            return TTFT_Q if self.ttft_p95_s is not None else None
        if sli == "tpot":
            return TPOT_Q if self.tpot_p95_s is not None else None
        if sli == "e2e":
            return E2E_Q if self.e2e_p99_s is not None else None
        return self.availability
