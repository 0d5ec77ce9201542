"""In-flight upstream attempts per deployment, and the oldest one still waiting for a token.

The execution layer calls `begin` before an attempt, `first_token` when content arrives and
`end` in its `finally`. The age of the oldest attempt still waiting for its first token is a
censored lower bound on that deployment's current TTFT: the scorer reads it so that a provider
that stalls is noticed before any of its slow answers complete.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple


class InFlightView(NamedTuple):
    """In-flight attempts of one deployment, and the start time of the oldest still waiting."""

    attempts: int
    oldest_waiting_since: float | None


NOTHING_IN_FLIGHT = InFlightView(0, None)
# Builds a `NamedTuple` without its generated Python `__new__` (hot path: every field, in order).
_new = tuple.__new__


class InFlight:
    """Tickets for attempts in flight, grouped by deployment (insertion-ordered by start)."""

    __slots__ = ("_by_deployment", "_ids", "_tickets")

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._tickets: dict[int, str] = {}
        self._by_deployment: dict[str, dict[int, float | None]] = {}

    def begin(self, deployment: str, t: float) -> int:
        """Register an attempt that started at `t`; returns its ticket."""
        ticket = next(self._ids)
        self._tickets[ticket] = deployment
        self._by_deployment.setdefault(deployment, {})[ticket] = t
        return ticket

    def first_token(self, ticket: int) -> None:
        """Mark the attempt as no longer waiting for its first token."""
        deployment = self._tickets.get(ticket)
        if deployment is not None:
            waiting = self._by_deployment[deployment]
            if ticket in waiting:
                waiting[ticket] = None

    def end(self, ticket: int) -> None:
        """Forget the attempt (idempotent)."""
        deployment = self._tickets.pop(ticket, None)
        if deployment is not None:
            self._by_deployment[deployment].pop(ticket, None)

    def view(self, deployment: str) -> InFlightView:
        """Count and oldest waiting start; O(attempts in flight on that deployment) at worst."""
        tickets = self._by_deployment.get(deployment)
        if not tickets:
            return NOTHING_IN_FLIGHT
        oldest = next((t for t in tickets.values() if t is not None), None)
        return _new(InFlightView, (len(tickets), oldest))

    def counts(self) -> dict[str, int]:
        """In-flight attempts per deployment (for sharing between replicas)."""
        return {d: len(t) for d, t in self._by_deployment.items() if t}
