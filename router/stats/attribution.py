"""Whether a failed attempt is its deployment's failure, or its principal's (tenant's) alone.

The statistics the ranking reads (a deployment's decayed error rate) and the SLO tracker's
deployment series are shared by everyone who uses the deployment, as its circuit breaker is,
and some failures are the sender's to provoke: a prompt that makes the provider answer 500, a
request a cheap deployment refuses and a dear one takes. Recorded as the deployment's, one
tenant's such requests moved every tenant's `auto` traffic to a dearer deployment (the
security audit: 32 of 41 of another tenant's requests while it sent, 39 of 40 after), though
the breaker, which attributes its verdicts, stayed closed.

So a failed attempt is held to the breaker's attribution rule before it is recorded
(`breaker_rules.alone`), with the ranker's own test in place of the breaker's trip rules: the
deployment's failures over the window, less `error_z` standard errors, above the request's
availability budget (`over_budget`; the ranker's `error_rate_over_budget`). While the
deployment served another principal in the window and, without this principal's verdicts, its
failures are not over the budget, the failure stands alone: it is the principal's, and is not
recorded as the deployment's. An outage fails everyone, so once the others' failures are over
the budget (two or three of theirs within the window) every failure counts again; a deployment
one principal used alone in the window counts that principal's failures exactly as before.
A failure stands alone only while another principal's answer began within `recent_s` (2 s)
before it (`RecentAnswers`): otherwise the deployment is not known to serve anyone now, and
an outage may be beginning (one earlier success of another principal's, still in the window,
kept a busy tenant's failures attributed for 7-8 s: the re-audits of 2026-12-07).

Per deployment, every verdict of the window and each principal's apart, in the breaker's own
bookkeeping (`verdict_windows`), bounded: `max_principals` principals a deployment, and the
deployments are the configuration's. Per process: a replica decides on what it served.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from router.execution.breaker_rules import Counts, alone
from router.execution.verdict_windows import PrincipalWindows, Window


@dataclass(frozen=True, slots=True)
class AttributionPolicy:
    """How far back a deployment's verdicts are kept (`window_s`, in `window_slots`), for how
    many principals apart, and the ranker's standard errors (`ScoringConfig.error_z`).

    The window is longer than the breaker's (10 s): a principal served once in it keeps the
    others' failures attributed, and the traffic a ranking sends elsewhere comes back only
    through exploration probes (3% of requests), which a short window would miss."""

    window_s: float = 30.0
    window_slots: int = 15
    max_principals: int = 64
    error_z: float = 1.0
    # how recently another principal's answer must have begun for the deployment to count as
    # serving others now (`RecentAnswers`): an outage is read as one at most this late
    recent_s: float = 2.0

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.window_slots < 1 or self.max_principals < 1:
            raise ValueError("window_s > 0, window_slots >= 1, max_principals >= 1 required")


def over_budget(counts: Counts, budget: float, error_z: float) -> bool:
    """The ranker's test on a window's counts: the share of failures, less `error_z` of its
    standard errors, above `budget` (one minus the availability objective)."""
    if counts.failures <= 0 or counts.requests <= 0:
        return False
    rate = counts.failures / counts.requests
    return rate - error_z * math.sqrt(rate * (1.0 - rate) / counts.requests) > budget


@dataclass(slots=True)
class _Deployment:
    """One deployment's verdicts: all of them, each principal's apart, when each principal's
    latest answer began, and the latest time a verdict was counted at."""

    total: Window
    principals: PrincipalWindows
    recent: RecentAnswers
    latest: float

    def count(self, principal: str, now: float, failed: bool) -> float:
        """A verdict of `principal`'s at `now`, counted at the latest time counted here (the
        time returned). Attempts are filed when their request ends, at their own end, so a
        verdict often comes after newer ones of others'; counted at its own time it went into
        the deployment's current slot and its principal's older one, expired from the latter
        first, and a poisoner's own failures read as the others' (with a 1 s fallback after
        each, 30 to 911 of its failures counted: the re-audit of 2026-12-07). The verdicts of
        a principal dropped to make room leave the total too (kept there as everyone's, the
        64th tenant's failures stood no longer alone: a service with 70 tenants lost the
        protection, the same re-audits)."""
        self.latest = now = max(now, self.latest)
        self.total.add(now, failed)
        dropped = self.principals.add(principal, now, failed=failed)
        if dropped is not None:
            self.total.remove(dropped, now)
        return now


class Attribution:
    """Each deployment's verdicts over the window, every principal's apart: told of every
    verdict a deployment's statistics could count (`served`, `failed`), it says of a failure
    whether it is the deployment's."""

    def __init__(self, policy: AttributionPolicy | None = None) -> None:
        self.policy = policy if policy is not None else AttributionPolicy()
        self._deployments: dict[str, _Deployment] = {}

    def _of(self, deployment: str, now: float) -> _Deployment:
        kept = self._deployments.get(deployment)
        if kept is None:
            policy = self.policy
            kept = self._deployments[deployment] = _Deployment(
                Window(policy.window_s, policy.window_slots, now),
                PrincipalWindows(policy.window_s, policy.window_slots, policy.max_principals),
                RecentAnswers(policy.max_principals), now)
        return kept

    def served(self, deployment: str, principal: str, now: float,
               begun: float | None = None) -> None:
        """An attempt of `principal` on `deployment`, begun at `begun` (`now` when not
        given), succeeded at `now`."""
        kept = self._of(deployment, now)
        kept.count(principal, now, failed=False)
        kept.recent.answered(principal, now if begun is None else begun)

    def failed(self, deployment: str, principal: str, now: float, budget: float,
               begun: float | None = None) -> bool:
        """An attempt of `principal` on `deployment`, begun at `begun` (`now` when not given),
        failed at `now`: whether the failure is the deployment's (to be recorded in its
        statistics), not `principal`'s alone. `budget`: the request's error budget (one minus
        its task's availability objective)."""
        kept = self._of(deployment, now)
        at = kept.count(principal, now, failed=True)
        since = (now if begun is None else begun) - self.policy.recent_s
        if not kept.recent.answered_since(since, other_than=principal):
            # No other principal's answer begun lately: the deployment is not known to serve
            # anyone now, so an outage may be beginning, whoever's failure this is. Another
            # tenant's success still in the window held every failure of a busy tenant's back
            # for 7-8 s (its clients answered 503 as the retry budget ran out), and a rule on
            # each tenant's own run of failures let a poisoner's own successes restart it (the
            # re-audits of 2026-12-07)
            return True
        everyone = Counts(0, *kept.total.counts(at))
        error_z = self.policy.error_z
        return not alone(lambda counts: over_budget(counts, budget, error_z), everyone,
                         kept.principals.of(principal, at))


class RecentAnswers:
    """When each principal's latest successful attempt on a deployment began (the
    `max_principals` heard most recently). A start, not an end: an answer begun before an
    outage and ended after it says nothing of the deployment now."""

    def __init__(self, max_principals: int) -> None:
        self._max = max_principals
        self._begun: OrderedDict[str, float] = OrderedDict()

    def answered(self, principal: str, begun: float) -> None:
        if begun >= self._begun.get(principal, begun):
            self._begun[principal] = begun
        self._begun.move_to_end(principal)
        while len(self._begun) > self._max:
            self._begun.popitem(last=False)

    def answered_since(self, since: float, other_than: str) -> bool:
        """Whether a principal other than `other_than` had an answer begun at `since` or
        later."""
        return any(at >= since for principal, at in self._begun.items()
                   if principal != other_than)
