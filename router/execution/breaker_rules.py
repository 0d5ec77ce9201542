"""When a deployment's circuit opens, as pure functions of its counts and whose they are.

The policy's rules (`trips`): `consecutive_failures` in a row (the run since the last success),
or an error rate of at least `error_rate` over the window with at least `min_volume` verdicts.

Every verdict is attributed to the principal that sent its request (its tenant): the breaker
is shared by everyone who uses the deployment, and some failures are the sender's to provoke
(a prompt that makes the provider answer 500, an answer long enough to outlast the
deployment's timeout). So while the deployment answered another principal in the window, one
principal's failures alone open nothing: the rules must also hold on the counts without that
principal's verdicts, as if it had sent nothing (`attributed`). An outage fails everyone, so it
still opens, on the others' failures too; a deployment that only one principal used in the
window opens on that principal's failures exactly as before. Before (the security audit), five
500-provoking requests from one tenant opened the breaker and every other tenant was refused
`circuit_open`, the attacker's own requests refused at no cost to it.

The same attribution decides whether a `Retry-After` holds the circuit open (`holds`), and
`blamed` names the principal whose failures weigh most, which a half-open spell does not give
its probe to first (`breaker.CircuitBreaker.allow`). The statistics the ranking reads hold a
failed attempt to it too (`alone`, with the ranker's error-rate test in place of `trips`:
`router/stats/attribution.py`). Nothing here keeps state or reads a clock; the counts are kept
by `verdict_windows`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """When a deployment's breaker opens and how it recovers."""

    consecutive_failures: int = 5
    error_rate: float = 0.5
    min_volume: int = 20
    window_s: float = 10.0
    window_slots: int = 10
    cool_down_s: float = 5.0
    half_open_probes: int = 1
    successes_to_close: int = 1
    holds_after: int = 2  # consecutive failures before a Retry-After holds the breaker open
    max_hold_s: float = 60.0  # the longest one Retry-After holds it (then a probe asks again)
    # Principals (tenants) whose verdicts a breaker keeps apart, the most recently heard: the
    # verdicts of one it no longer tracks count as everyone else's (memory stays bounded).
    max_principals: int = 64

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1 or self.min_volume < 1:
            raise ValueError("consecutive_failures and min_volume must be >= 1")
        if not 0 < self.error_rate <= 1:
            raise ValueError("error_rate must be in (0, 1]")
        if self.window_s <= 0 or self.window_slots < 1 or self.cool_down_s < 0:
            raise ValueError("window_s > 0, window_slots >= 1, cool_down_s >= 0 required")
        if self.half_open_probes < 1 or self.successes_to_close < 1 or self.holds_after < 1:
            raise ValueError("half_open_probes, successes_to_close and holds_after must be >= 1")
        if self.max_hold_s <= 0:
            raise ValueError("max_hold_s must be > 0")
        if self.max_principals < 1:
            raise ValueError("max_principals must be >= 1")


@dataclass(frozen=True, slots=True)
class Counts:
    """Verdicts of a deployment, or of one principal's requests to it: failures in the current
    run (since the deployment's last success, whoever's), and the window's verdicts and failures."""

    run: int = 0
    requests: int = 0
    failures: int = 0

    @property
    def served(self) -> int:
        """Successes in the window."""
        return self.requests - self.failures

    def without(self, own: Counts) -> Counts:
        """These counts less `own` (one principal's share of them)."""
        return Counts(self.run - own.run, self.requests - own.requests,
                      self.failures - own.failures)


def trips(policy: BreakerPolicy, counts: Counts) -> bool:
    """The policy's rules: `consecutive_failures` in a row, or the error rate over the window
    with at least `min_volume` verdicts."""
    return counts.run >= policy.consecutive_failures or (
        counts.requests >= policy.min_volume
        and counts.failures >= policy.error_rate * counts.requests)


def alone(rule: Callable[[Counts], bool], total: Counts, own: Counts) -> bool:
    """Whether one principal's failures stand alone: the deployment served someone else in the
    window, and `rule` does not hold on its `total` without that principal's verdicts (`own`).
    Such failures are the principal's, not the deployment's: the breaker opens nothing on
    them, nor do the statistics the ranking reads count them (`router/stats/attribution.py`)."""
    rest = total.without(own)
    return rest.served > 0 and not rule(rest)


def attributed(rule: Callable[[Counts], bool], total: Counts,
               principals: Iterable[Counts]) -> bool:
    """Whether `rule` holds on the deployment's `total` and, for each principal that failed
    while the deployment served someone else in the window, also without that principal's
    verdicts (no principal's failures stand `alone`). `principals`: the counts of each
    principal kept apart (any others are in `total` only, so they count as everyone's)."""
    return rule(total) and not any(
        alone(rule, total, own) for own in principals if own.run or own.failures)


def opens(policy: BreakerPolicy, total: Counts, principals: Iterable[Counts]) -> bool:
    """Whether a closed circuit opens (`trips`, `attributed`)."""
    return attributed(lambda counts: trips(policy, counts), total, principals)


def holds(policy: BreakerPolicy, total: Counts, principals: Iterable[Counts]) -> bool:
    """Whether throttling repeats enough for a `Retry-After` to hold the circuit open:
    `holds_after` failures in a row, `attributed` (one principal throttled alone moves its own
    requests, not everyone's)."""
    return attributed(lambda counts: counts.run >= policy.holds_after, total, principals)


def blamed(principals: Mapping[str, Counts]) -> str | None:
    """The principal with the most failures in the window (in the run, on a tie), if any
    failed: the one a half-open spell offers its probe to last."""
    name, most = None, (0, 0)
    for principal, counts in principals.items():
        weight = (counts.failures, counts.run)
        if weight > most:
            name, most = principal, weight
    return name
