"""A deployment's `max_in_flight` shared fairly among the tenants asking for it.

Taken first come, first served, a cap went to whichever attempts came first: one tenant's burst
(or background traffic) took every place, and every other tenant's request to the deployment
was refused at once (the overload audit of 2026-12-07: quiet tenants served 4-11% during a
flood). Now the last places (`headroom`: a quarter of the cap, at least one) go only to tenants
holding less than an equal share of the cap among the tenants that asked for the deployment in
the last `ACTIVE_S` (10) seconds. A tenant alone has the whole cap; below the headroom anyone
may take a place, so a flooding tenant holds at most the cap less the headroom once another
tenant asks, and the others share what is left. The headroom idles while they ask for none of
it (the price of keeping it: a tenant alone again has it back `ACTIVE_S` after the others'
last request).

`admits` is the rule, a pure function; `FairShares` keeps what it reads (places held per tenant,
when each tenant last asked), for capped deployments only. Not thread-safe: one event loop.
"""

from __future__ import annotations

import math
from collections import Counter

from router.execution.recent_tenants import RecentTenants

# How long a tenant that asked for a deployment counts among those sharing its cap. Longer keeps
# the headroom for sparser tenants, but a single request of another tenant keeps it from a
# tenant alone that long (at 60 s, the re-audit of 2026-12-07 saw a lone tenant held to 3 of 4
# places for a minute after one stray request).
ACTIVE_S = 10.0
# The share of a cap kept for tenants under their equal share.
HEADROOM_SHARE = 0.25


def headroom(cap: int) -> int:
    """The places of a cap of `cap` that only tenants under their equal share may take."""
    return max(1, math.ceil(cap * HEADROOM_SHARE))


def admits(cap: int, load: int, held: int, active: int) -> bool:
    """Whether a tenant holding `held` of a deployment's `load` attempts in flight may begin
    one more under its cap of `cap`, `active` tenants (it included) having asked lately."""
    if load >= cap:
        return False
    if active <= 1 or load < cap - headroom(cap):
        return True
    return held * active < cap


class FairShares:
    """Places held per tenant on capped deployments, and who asked for them lately."""

    __slots__ = ("_asked", "_held", "_next", "_tickets")

    def __init__(self) -> None:
        self._held: dict[str, Counter[str]] = {}
        self._asked: dict[str, RecentTenants] = {}  # per deployment, over `ACTIVE_S`
        self._tickets: dict[int, tuple[str, str]] = {}
        self._next = 0

    def admits(self, deployment: str, tenant: str, cap: int, load: int, now: float) -> bool:
        """Whether `tenant` may begin an attempt on `deployment` (`load` in flight of `cap`);
        the ask counts it among those sharing the cap either way."""
        asked = self._asked.get(deployment)
        if asked is None:
            asked = self._asked[deployment] = RecentTenants(ACTIVE_S)
        asked.note(tenant, now)
        held = self._held.get(deployment)
        return admits(cap, load, held[tenant] if held else 0, len(asked))

    def begin(self, deployment: str, tenant: str) -> int:
        """Count a place `tenant` took on `deployment`; the ticket `end` takes."""
        self._held.setdefault(deployment, Counter())[tenant] += 1
        self._next += 1
        self._tickets[self._next] = (deployment, tenant)
        return self._next

    def end(self, ticket: int) -> None:
        """The place is free again (idempotent; 0, no place, is ignored)."""
        taken = self._tickets.pop(ticket, None)
        if taken is None:
            return
        deployment, tenant = taken
        held = self._held[deployment]
        held[tenant] -= 1
        if held[tenant] <= 0:
            del held[tenant]

    def held(self, deployment: str) -> dict[str, int]:
        """Places each tenant holds on `deployment` now."""
        return dict(self._held.get(deployment, {}))
