"""Latency feedback: outcomes flow into the statistics, statistics into the ranking.

`StatsSink` is an `OutcomeSink`: per upstream attempt it records an `Observation` (successes feed
the latency estimates, failures the error rates, but for those one tenant's requests alone
provoke) and per request the router-level timings for the task's SLO. `StatsRanker` is the
`Ranker` the decision uses: it scores each eligible deployment from its live statistics
(predicted TTFT/E2E at the SLO percentiles, chance of meeting the SLO, cost, error rate, SLO
demotion, breaker state) under the policy's objective.
Timestamps: the request path uses `perf_counter`; statistics use the wall clock (replicas
merge them), converted here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from policies.eligibility import RequestFacts, Verdict
from policies.labels import TASKS, Task
from policies.schema import PoliciesSpec, SloSpec, TaskPolicy
from router.decide import EXPLORED, Ranked
from router.errors import ClientStalledError
from router.execution.attempt import AttemptRecord
from router.outcomes import Outcome
from router.runtime_config import RuntimeConfig
from router.scoring import Candidate, Ranking, ScoreRequest, ScoringConfig, Weights, rank
from router.scoring.blend_cache import BlendCache
from router.slo import SloTargets, SloTracker
from router.stats import Observation, StatsStore, prompt_bucket
from router.stats.attribution import Attribution
from router.steady_clock import steady_time

Clock = Callable[[], float]
STALLED_CLIENT = ClientStalledError.__name__


def slo_targets(spec: SloSpec) -> SloTargets:
    def seconds(ms: float | None) -> float | None:
        return ms / 1e3 if ms is not None else None

    return SloTargets(ttft_p95_s=seconds(spec.ttft_p95_ms), tpot_p95_s=seconds(spec.tpot_p95_ms),
                      e2e_p99_s=seconds(spec.e2e_p99_ms), availability=spec.availability)


# A request whose client waits less than its task's latency target is held to this share of
# that wait instead: a first token predicted for the wait's last instant races the client's timer,
# and an attempt the client cut before its first token is recorded at its age (a lower bound of
# its TTFT), which lies at the wait's end; a deployment slower than the wait must read as
# missing it, not as just meeting it.
CLIENT_WAIT_SHARE = 0.9
MIN_TARGET_S = 1e-3  # a wait already over still has a target (0 would read as none)


def held_to_client_wait(targets: SloTargets, facts: RequestFacts) -> SloTargets:
    """`targets` for one request: the task's TTFT target (a stream's) and E2E target, each
    shortened to `CLIENT_WAIT_SHARE` of the time the client waits for it (its first token, its
    whole answer: `RequestFacts.first_token_wait_s`, `answer_wait_s`) when that is shorter.
    A target the task does not set stays unset: a wait alone does not make a latency target
    (every request waits for the server's `request_timeout_s`)."""
    ttft, e2e = targets.ttft_p95_s, targets.e2e_p99_s
    first, whole = facts.first_token_wait_s, facts.answer_wait_s
    if ttft is not None and first is not None and facts.stream and (
            held := max(first * CLIENT_WAIT_SHARE, MIN_TARGET_S)) < ttft:
        ttft = held
    if e2e is not None and whole is not None and (
            held := max(whole * CLIENT_WAIT_SHARE, MIN_TARGET_S)) < e2e:
        e2e = held
    if ttft == targets.ttft_p95_s and e2e == targets.e2e_p99_s:
        return targets
    return replace(targets, ttft_p95_s=ttft, e2e_p99_s=e2e)


def service_availability(policies: PoliciesSpec | None) -> float:
    """The objective every request together is held to (`SloTracker.record_service`): the
    default policy's availability."""
    return (policies.default.slo if policies is not None else SloSpec()).availability


def targets_by_task(policies: PoliciesSpec | None) -> dict[Task, SloTargets]:
    return {task: slo_targets(policies.for_task(task).slo if policies is not None else SloSpec())
            for task in TASKS}


@dataclass(frozen=True)
class HedgeDelays:
    """When to hedge an attempt: at its deployment's observed TTFT `percentile` for the task,
    read from the decayed sketch itself, once enough successes back it; never on a guess.

    The percentile must sit below the slow tail's start (with 10% of requests in a tail, p88
    rather than p90; measured in bench/chaos.py), which only the sketch, not the summaries'
    fixed p50/p90/p95/p99, can resolve. The margin is thin: in a window where the tail happens
    to weigh more than 1 - `percentile`, the percentile lands inside the tail and hedges start
    too late to help. So the delay is capped at `max_median_ratio` times the median: an attempt
    that has waited that many typical first tokens is in the tail whatever the percentile says.
    A non-streamed request's first content is its whole answer: its delay is read alike from
    the E2E of non-streamed answers.

    A stream of a task the deployment has not yet answered `min_observations` times (a task
    of a few requests a second, or just after a start) is hedged at the deployment's TTFT
    model instead: its line at the request's prompt size times its residuals' percentile, all
    tasks together, where the line is trusted to `min_trust` at that size (`TtftFit.trust`:
    within 1.3 times the prompt sizes it was fitted on, in its soft scale, for 0.8). Prompt
    size is what moves a first token from task to task; a long-prompt task is not hedged at a
    short-prompt task's delay, since the line has not seen prompts that long. A non-streamed
    answer's E2E depends on its length, which no model here predicts, so it has no such
    fallback.
    """

    store: StatsStore
    percentile: float = 0.88
    max_median_ratio: float = 3.0
    min_observations: float = 20.0
    min_trust: float = 0.8

    def __call__(self, deployment: str, task: Task, prompt_tokens: int,
                 stream: bool = True) -> float | None:
        # Both levels from one read of the sketch (one sort of its buckets), in ascending order.
        above = self.percentile >= 0.5
        levels = (0.5, self.percentile) if above else (self.percentile, 0.5)
        read = self.store.ttft_quantiles if stream else self.store.e2e_quantiles
        found, weight = read(deployment, task, levels)
        if (found is None or weight < self.min_observations) and stream:
            found, weight = self.store.ttft_quantiles_at_size(deployment, prompt_tokens, levels,
                                                              self.min_trust)
        if found is None or weight < self.min_observations:
            return None
        median, value = found if above else (found[1], found[0])
        return min(value, self.max_median_ratio * median)


@dataclass
class StatsRanker:
    """Orders eligible deployments by live statistics under the policy's objective.

    Runs once per request on the decision step (within the scoring budget, `bench/scoring.py`):
    a policy's SLO targets and scoring settings are built once per policy object and reused.
    """

    config: RuntimeConfig
    store: StatsStore
    slo: SloTracker
    unhealthy: Callable[[str], bool]
    rng: random.Random
    explore_share: float = 0.03
    clock: Clock = steady_time
    blends: BlendCache = field(default_factory=BlendCache)
    _settings: dict[int, tuple[TaskPolicy, float, SloTargets, ScoringConfig]] = field(
        default_factory=dict, init=False, repr=False)

    def rank(self, policy: TaskPolicy, facts: RequestFacts,
             eligible: Sequence[Verdict]) -> tuple[Ranked, ...]:
        ranking = self.ranking(policy, facts, [v.deployment for v in eligible])
        return tuple(Ranked(c.deployment, c.score,
                            "; ".join((EXPLORED, *c.reasons) if c.explored else c.reasons)
                            or "ranked", c.explored, c.meets_slo)
                     for c in ranking.candidates)

    def ranking(self, policy: TaskPolicy, facts: RequestFacts,
                deployments: Sequence[str]) -> Ranking:
        now = self.clock()
        targets, scoring = self._policy_settings(policy)
        held = held_to_client_wait(targets, facts)
        if held is not targets and scoring.explore_share > 0.0:
            # A client waiting less than the task's target is no probe: a stale deployment
            # tried for it is likely cut at its wait (a 504), and tells only that it was slower
            # than an impatient client (a flaky test showed two such 504s in twelve requests).
            scoring = replace(scoring, explore_share=0.0)
        targets = held
        task, prompt = facts.task, facts.prompt_tokens
        bucket = prompt_bucket(prompt)
        prices, view, unhealthy, penalty = (self.config.deployments, self.store.view,
                                            self.unhealthy, self.slo.penalty)
        blended, prior, error_z = self.blends.get, scoring.prior, scoring.error_z
        new = tuple.__new__  # a `Candidate` without its Python `__new__`: every field, in order
        candidates = []
        for name in deployments:
            deployment = prices[name]
            stats = view(name, task, prompt)
            candidates.append(new(Candidate, (
                name, deployment.input_price_per_mtok, deployment.output_price_per_mtok, stats,
                unhealthy(name), penalty(name, task, prompt, now), None,
                blended((name, task, bucket), stats, prior, error_z, now))))
        history = self.store.task_summary(task)
        request = new(ScoreRequest, (task, facts.risk, prompt, facts.max_output_tokens,
                                     facts.stream, facts.completions))
        return rank(request, targets, candidates, scoring, now=now,
                    rng=self.rng, output_history=history.output_tokens if history else None)

    def _policy_settings(self, policy: TaskPolicy) -> tuple[SloTargets, ScoringConfig]:
        """The policy's SLO targets and scoring settings (policies are frozen: cached by
        identity, rebuilt when `explore_share` changes)."""
        cached = self._settings.get(id(policy))
        if cached is not None and cached[0] is policy and cached[1] == self.explore_share:
            return cached[2], cached[3]
        weights = Weights(slo=policy.weights.slo, cost=policy.weights.cost,
                          latency=policy.weights.latency)
        scoring = ScoringConfig(objective=policy.objective, weights=weights,
                                explore_share=self.explore_share)
        targets = slo_targets(policy.slo)
        if len(self._settings) >= 256:  # a reloaded config's old policies: let them go
            self._settings.clear()
        self._settings[id(policy)] = (policy, self.explore_share, targets, scoring)
        return targets, scoring


class StatsSink:
    """Records every outcome's attempts and its request-level timings.

    An attempt's failure is recorded as its deployment's (the store's error rate, the SLO
    tracker's deployment series) only when it does not stand alone: while the deployment
    served another tenant fine in the window, one tenant's failures are its own and are left
    out, as its circuit breaker leaves them (`router/stats/attribution.py`). The request's
    task and the service count it all the same: it is what the client got."""

    def __init__(self, store: StatsStore, slo: SloTracker, wall: Clock = steady_time,
                 mono: Clock = time.perf_counter,
                 attribution: Attribution | None = None) -> None:
        self._store = store
        self._slo = slo
        self._wall = wall
        self._mono = mono
        self._attribution = attribution if attribution is not None else Attribution()

    def record(self, outcome: Outcome) -> None:
        if outcome.idempotent_replay:
            # A stored answer sent again: its request was counted when it ran (a replayed 504
            # `unknown_commit` counted again at each retry multiplied one incident in the
            # availability budget: the re-audit of 2026-12-07), and nothing of a deployment's
            # is in it
            return
        failed = _service_failure(outcome)
        if failed is not None:
            self._slo.record_service(self._wall(), failed)
        if outcome.task is None or outcome.task not in TASKS:
            return
        task = next(t for t in TASKS if t == outcome.task)
        offset = self._wall() - self._mono()
        # Without the provider's usage (a stream its client left, one a timeout cut, a
        # provider that sends none), the router's estimate: filed at 0 tokens, a long prompt's
        # TTFT taught the short prompts' bucket that the deployment was slow (the feedback
        # audit of 2026-12-07: short prompts left a deployment that was fast for them).
        prompt = (outcome.prompt_tokens if outcome.prompt_tokens is not None
                  else outcome.prompt_estimate if outcome.prompt_estimate is not None else 0)
        # One choice's tokens: the TPOT and output-length estimates are a choice's decoding.
        per_choice = outcome.tokens_per_choice
        output = per_choice if per_choice is not None else 0
        winner = outcome.winner
        timed = outcome.tpot_s is not None  # its TPOT is known (tokens, not chunks, counted)
        targets = self._slo.targets.get(task)
        budget = 1.0 - (targets.availability if targets is not None else SloSpec().availability)
        for attempt in outcome.attempts:
            if attempt.outcome == "cancelled" and winner is not None:
                if attempt.started_at <= winner.started_at:
                    self._record_censored(attempt, task, prompt, offset, outcome.stream)
                continue
            if attempt.outcome not in ("won", "failed") or attempt.failed_in_router:
                continue  # the router's own failure: nothing of the deployment
            if attempt.refused_request and (winner is None
                                            or winner.deployment == attempt.deployment):
                # Refused, and no other deployment took it: the request's fault. One another
                # deployment answered is this deployment's failure (it refuses what its peers
                # take: a provider that refused everything stayed first in the ranking).
                continue
            won = attempt.outcome == "won"
            # The client's own deadline cut it: no verdict on the deployment's health, but one
            # that had not begun answering took longer than it ran (a censored TTFT, as a
            # losing primary's): dropped, a deployment slower than every client's patience
            # would learn nothing and keep its traffic.
            cut = attempt.cut_by_client_deadline or attempt.outlasted
            if cut and not won:
                self._record_censored(attempt, task, prompt, offset, outcome.stream)
                continue
            end = outcome.ended_at if won and outcome.ended_at is not None else attempt.ended_at
            # a stream its client left, or a timeout cut still writing: its length and E2E
            # end where it stopped
            whole = not (won and (attempt.abandoned or attempt.outlasted))
            last = outcome.last_token_at if won and timed else None
            obs = Observation.from_timings(
                deployment=attempt.deployment, task=task, prompt_tokens=prompt,
                output_tokens=output if won else 0, t_start=attempt.started_at + offset,
                t_first_token=_shift(attempt.first_content_at, offset),
                t_last_token=_shift(last, offset),
                t_end=(end if end is not None else attempt.started_at) + offset,
                # A won attempt has an error only when its answer broke after it had started.
                error=None if cut else attempt.error_class, streamed=outcome.stream,
                whole=whole)
            if obs.error is None:
                self._attribution.served(attempt.deployment, outcome.tenant, obs.t,
                                         begun=attempt.started_at + offset)
            elif not self._attribution.failed(attempt.deployment, outcome.tenant, obs.t, budget,
                                              begun=attempt.started_at + offset):
                continue  # its tenant's alone: the deployment served the others fine
            self._store.record(obs)
            self._slo.record_attempt(obs, outcome.stream)
        if failed is not None:  # else not the service's to count (`_service_failure`)
            self._record_request(outcome, task, prompt, output, offset)

    def _record_censored(self, attempt: AttemptRecord, task: Task, prompt: int,
                         offset: float, streamed: bool) -> None:
        """A primary that lost a hedge race, or an attempt its client's deadline cut before it
        answered: its TTFT (a non-streamed one's E2E) is known only to exceed the time it ran.

        Recorded at that lower bound (a success with no output), so the deployment's sketch keeps
        the mass of its slow tail. Dropping it would drop exactly the slow answers: the sketch's
        percentiles would fall into the fast body, the hedge trigger (a percentile read from it)
        would fire on ever more requests, and the hedge budget would run out on the tail.
        Only an attempt begun no later than the winner is recorded so (`record`): a hedge that
        lost was cut when the primary answered, however little time it had had, so its age
        bounds nothing of its deployment's. Recorded, it made a slow hedge target look as fast
        as the hedge delay's remainder and ranked it first (`test_hedge_loser_stats.py`).
        """
        if attempt.ended_at is None or attempt.first_content_at is not None:
            return
        self._store.record(Observation.from_timings(
            deployment=attempt.deployment, task=task, prompt_tokens=prompt, output_tokens=0,
            t_start=attempt.started_at + offset, t_first_token=attempt.ended_at + offset,
            t_last_token=None, t_end=attempt.ended_at + offset, streamed=streamed))

    def _record_request(self, outcome: Outcome, task: Task, prompt: int, output: int,
                        offset: float) -> None:
        ended = outcome.ended_at
        if ended is None:
            return
        obs = Observation.from_timings(
            deployment=outcome.deployment or "-", task=task, prompt_tokens=prompt,
            output_tokens=output, t_start=outcome.arrived_at + offset,
            t_first_token=_shift(outcome.first_content_at, offset),
            t_last_token=_shift(outcome.last_token_at if outcome.tpot_s is not None else None,
                                offset),
            t_end=ended + offset, queue_s=outcome.queue_s or 0.0,
            error=outcome.error_type if outcome.status >= 400 else None,
            cached=outcome.cache == "hit")
        self._slo.record_request(obs, outcome.stream)


def _service_failure(outcome: Outcome) -> bool | None:
    """Whether the request failed by the service's availability (a 5xx, or the provider's
    throttling), or None when it is not the service's to count. A 4xx is the caller's to fix
    (ours, or the provider's refusal of the request: `ProviderRejectedError`), except the
    provider's throttling, which is its capacity; and a client that left, or stopped reading
    until the deadline cut its stream, or whose own shorter timeout cut it before it was a
    stall, ended the request itself."""
    client_error = (400 <= outcome.status < 500
                    and outcome.error_type != "ProviderRateLimitedError")
    if (outcome.client_disconnected or outcome.ended_at is None or client_error
            or outcome.error_type == STALLED_CLIENT or outcome.cut_by_client):
        return None
    return outcome.status >= 400


def _shift(value: float | None, offset: float) -> float | None:
    return None if value is None else value + offset
