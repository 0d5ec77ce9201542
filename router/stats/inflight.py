"""In-flight upstream attempts per deployment, and the oldest one still waiting for a token.

The execution layer calls `begin` before an attempt, `first_token` when content arrives and
`end` in its `finally`. The age of the oldest attempt still waiting for its first token is a
censored lower bound on that deployment's current TTFT: the scorer reads it so that a provider
that stalls is noticed before any of its slow answers complete.

A non-streamed attempt's first content is its whole answer, so its wait is no wait for a first
token: it is kept apart (`oldest_unstreamed_since`), and the scorer compares its age with the
predicted E2E of non-streamed requests only (`router/scoring/predict.py`).

Waiting is judged by prompt size: an 8k-token prompt that has waited 2 s says nothing about
the TTFT of a 16-token one, while a short prompt waiting that long says the long one would wait
at least as long (prefill grows with the prompt). So a view for a prompt bucket counts only
waiting attempts of that bucket or smaller ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from router.stats.observation import prompt_bucket


class InFlightView(NamedTuple):
    """In-flight attempts of one deployment, the start time of the oldest streamed one still
    waiting for its first token, and of the oldest non-streamed one still waiting for its
    answer."""

    attempts: int
    oldest_waiting_since: float | None
    oldest_unstreamed_since: float | None = None


NOTHING_IN_FLIGHT = InFlightView(0, None, None)
# Builds a `NamedTuple` without its generated Python `__new__` (hot path: every field, in order).
_new = tuple.__new__


class InFlight:
    """Tickets for attempts in flight, grouped by deployment; those still waiting for their
    first content also by start (insertion order), with their prompt bucket, streamed and
    non-streamed apart."""

    __slots__ = ("_by_deployment", "_ids", "_tickets", "_unstreamed", "_waiting")

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._tickets: dict[int, str] = {}
        self._by_deployment: dict[str, set[int]] = {}
        self._waiting: dict[str, dict[int, tuple[float, int]]] = {}
        self._unstreamed: dict[str, dict[int, tuple[float, int]]] = {}

    def begin(self, deployment: str, t: float, prompt_tokens: int = 0,
              streamed: bool = True) -> int:
        """Register an attempt that started at `t`; returns its ticket. Without a prompt size
        the attempt counts as a short one (its wait then weighs on every size). A non-streamed
        one (`streamed=False`) waits for its whole answer, not for a first token."""
        ticket = next(self._ids)
        self._tickets[ticket] = deployment
        self._by_deployment.setdefault(deployment, set()).add(ticket)
        waiting = self._waiting.setdefault(deployment, {})
        if not streamed:
            waiting = self._unstreamed.setdefault(deployment, {})
        waiting[ticket] = (t, prompt_bucket(prompt_tokens))
        return ticket

    def first_token(self, ticket: int) -> None:
        """Mark the attempt as no longer waiting for its first content."""
        deployment = self._tickets.get(ticket)
        if deployment is not None and self._waiting[deployment].pop(ticket, None) is None:
            self._unstreamed_of(deployment).pop(ticket, None)

    def end(self, ticket: int) -> None:
        """Forget the attempt (idempotent)."""
        deployment = self._tickets.pop(ticket, None)
        if deployment is not None:
            self._by_deployment[deployment].discard(ticket)
            if self._waiting[deployment].pop(ticket, None) is None:
                self._unstreamed_of(deployment).pop(ticket, None)

    def _unstreamed_of(self, deployment: str) -> dict[int, tuple[float, int]]:
        found = self._unstreamed.get(deployment)
        return found if found is not None else {}

    def view(self, deployment: str, bucket: int = 0) -> InFlightView:
        """Count, and the start of the oldest streamed attempt still waiting for its first
        token, and of the oldest non-streamed one still waiting for its answer, among those
        whose prompt bucket is at most `bucket`; usually the first waiting one of each."""
        tickets = self._by_deployment.get(deployment)
        if not tickets:
            return NOTHING_IN_FLIGHT
        oldest = next((t for t, b in self._waiting[deployment].values() if b <= bucket), None)
        whole = self._unstreamed.get(deployment)
        unstreamed = (next((t for t, b in whole.values() if b <= bucket), None) if whole
                      else None)
        return _new(InFlightView, (len(tickets), oldest, unstreamed))

    def counts(self) -> dict[str, int]:
        """In-flight attempts per deployment (for sharing between replicas)."""
        return dict(self.load)

    @property
    def load(self) -> Mapping[str, int]:
        """In-flight attempts per deployment, read live (no copy): prefix affinity's load."""
        return _Load(self._by_deployment)


class _Load(Mapping[str, int]):
    """A live read-only view of the attempts in flight per deployment."""

    __slots__ = ("_by_deployment",)

    def __init__(self, by_deployment: dict[str, set[int]]) -> None:
        self._by_deployment = by_deployment

    def __getitem__(self, deployment: str) -> int:
        tickets = self._by_deployment.get(deployment)
        if not tickets:
            raise KeyError(deployment)
        return len(tickets)

    def get(self, deployment: str, default: int = 0) -> int:  # type: ignore[override]
        tickets = self._by_deployment.get(deployment)
        return len(tickets) if tickets else default

    def __iter__(self) -> Iterator[str]:
        return (d for d, t in self._by_deployment.items() if t)

    def __len__(self) -> int:
        return sum(1 for t in self._by_deployment.values() if t)
