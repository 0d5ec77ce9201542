"""The tenants that asked for something within a horizon: how many share it (the retry budget,
a deployment's `max_in_flight`). Kept oldest first, each ask moving its tenant to the end, so
forgetting those past the horizon takes only them; memory is the tenants of one horizon."""

from __future__ import annotations


class RecentTenants:
    """Tenants that asked in the last `horizon_s` seconds (times from the caller's clock)."""

    __slots__ = ("_horizon_s", "_last")

    def __init__(self, horizon_s: float) -> None:
        self._horizon_s = horizon_s
        self._last: dict[str, float] = {}  # tenant -> when it last asked, oldest first

    def note(self, tenant: str, now: float) -> None:
        """`tenant` asks now; those that last asked before the horizon are forgotten."""
        last = self._last
        last.pop(tenant, None)
        last[tenant] = now
        while (oldest := next(iter(last))) != tenant and last[oldest] < now - self._horizon_s:
            del last[oldest]

    def __len__(self) -> int:
        return len(self._last)
