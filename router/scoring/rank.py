"""Pure ranking of candidates for one request under the policy's objective, with exploration.

Tiers first: 0 = predicted to meet every SLO target (TTFT p95, TPOT p95, E2E p99, and an error
rate not significantly above the availability budget), healthy and not demoted; 1 = healthy but
not meeting (or demoted); 2 = unhealthy (circuit open), kept last so a request is still served
when nothing else is left. A non-streamed request is held to the E2E and availability targets
only (its first content is the whole answer; the SLO tracker counts it so). Within tiers, by
objective:
- `min_cost`: tier 0 by expected cost, ties by latency; other tiers by `P(meet) * (1 - penalty)`
  in tenths, then latency in 10% steps, then cost.
- `min_latency`: by the latency at the SLO percentile (TTFT p95 when streaming, else E2E p99)
  divided by the success rate, times `1 + penalty`.
- `weighted`: by utility `w_slo * P(meet) * (1 - penalty) - w_cost * cost / max cost
  - w_latency * latency / latency target`.
For both, only two tiers lead: unhealthy last, and before it those whose error rate is
significantly above the availability budget (a deployment failing fast 30% of the time read
as the fastest, 0.2 s / 0.7, and kept most of a task's traffic until burn-rate demotion).
Exploration: with probability `explore_share` (never for `high` risk) the first place goes to a
stale candidate (fewer than `fresh_n` effective TTFT observations at the request's prompt size)
with no attempt waiting for its first token, drawn with weight `1 / (1 + n)`.
The clock (`now`) and the random source (`rng`) are arguments. The same ranking written one
helper per step is `router/scoring/reference.py` (the tests hold both to identical output).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from operator import attrgetter, itemgetter

from router.scoring.predict import expected_output_tokens, log_targets, predict
from router.scoring.types import (
    Candidate,
    Prediction,
    Ranking,
    ScoredCandidate,
    ScoreRequest,
    ScoringConfig,
)
from router.slo.targets import SloTargets
from router.stats.quantiles import Quantiles

SortKey = tuple[int | float | str, ...]  # compared only within one objective and tier

_cost_of = attrgetter("cost_usd")
_sort_key = itemgetter(0)
# Builds a `NamedTuple` without its generated Python `__new__` (see predict.py).
_new = tuple.__new__


def _explore_pick(scored: list[ScoredCandidate], request: ScoreRequest, config: ScoringConfig,
                  rng: random.Random) -> int | None:
    if request.risk == "high" or config.explore_share <= 0.0 or len(scored) < 2:
        return None
    if rng.random() >= config.explore_share:
        return None
    # One probe at a time: a candidate with an attempt still waiting for its first token is
    # about to be observed anyway (and, when it is slow, more probes would only pile up on it).
    stale = [(i, 1.0 / (1.0 + s.prediction.n_eff)) for i, s in enumerate(scored)
             if i > 0 and not s.unhealthy and s.prediction.n_eff < config.fresh_n
             and s.prediction.censored_wait_s <= 0.0]
    if not stale:
        return None
    draw = rng.random() * sum(w for _, w in stale)
    for i, w in stale:
        draw -= w
        if draw <= 0.0:
            return i
    return stale[-1][0]


# Predicted latencies within one such step (10%) of each other count as equal where a `min_cost`
# choice falls to latency (no candidate meets the SLO): the cheaper then wins. Compared to the
# nanosecond, two equally slow deployments were told apart by noise in their estimates, and
# the one with the traffic, demoted first by its SLO burn, handed it to the other, dearer or
# not, in blocks of 10-25 s (an audit: 57-60% of the traffic at twice the price).
LATENCY_STEP = math.log(1.1)


def latency_step(latency_s: float) -> int:
    """The 10% step `latency_s` falls in (`LATENCY_STEP`)."""
    return math.floor(math.log(max(latency_s, 1e-6)) / LATENCY_STEP)


def rank(request: ScoreRequest, targets: SloTargets, candidates: Sequence[Candidate],
         config: ScoringConfig, *, now: float, rng: random.Random,
         output_history: Quantiles | None = None) -> Ranking:
    """Rank `candidates` best first for `request`; pure given `now` and `rng`.

    One flat loop per candidate (hot path; see `predict.py`): the tier's failure codes, then the
    objective's sort key and score, as `reference.reference_rank` spells out step by step.
    """
    out_tokens = expected_output_tokens(request.max_tokens, output_history, config)
    logs = log_targets(targets)
    preds = [predict(c, request, out_tokens, targets, config, now, logs) for c in candidates]
    max_cost = max(map(_cost_of, preds), default=0.0)
    ttft_target, tpot_target, e2e_target = targets.ttft_p95_s, targets.tpot_p95_s, \
        targets.e2e_p99_s
    if out_tokens <= 1:
        tpot_target = None
    err_budget = 1.0 - targets.availability
    stream = request.stream
    if not stream:  # the whole answer is its first content: judged on E2E, as the SLO is
        ttft_target = tpot_target = None
    objective = config.objective
    weights = config.weights
    lat_target = ttft_target if stream else e2e_target
    floor = math.floor
    rows: list[tuple[SortKey, float, Candidate, Prediction, list[str], int]] = []
    for c, p in zip(candidates, preds, strict=True):
        failures: list[str] = []
        if ttft_target is not None and p.ttft_q_s > ttft_target:
            failures.append("ttft_p95_over_target")
        if tpot_target is not None and p.tpot_q_s > tpot_target:
            failures.append("tpot_p95_over_target")
        if e2e_target is not None and p.e2e_q_s > e2e_target:
            failures.append("e2e_p99_over_target")
        failing = p.error_rate_low > err_budget
        if failing:
            failures.append("error_rate_over_budget")
        penalty = c.slo_penalty
        if penalty > 0.0:
            failures.append("demoted_by_burn_rate")
        unhealthy = c.unhealthy
        if unhealthy:
            failures.append("unhealthy")
            tier = 2
        else:
            tier = 1 if failures else 0
        lat = p.ttft_q_s if stream else p.e2e_q_s
        cost = p.cost_usd
        key: SortKey
        if objective == "min_cost":
            if tier == 0:
                key = (0, cost, lat, c.deployment)
                score = 2.0 + (1.0 - (cost / max_cost if max_cost > 0.0 else 0.0))
            else:
                # Chances within the same tenth count as equal, so when nobody is likely to
                # meet the SLO the faster prediction wins (not the wider distribution), then,
                # among latencies within a step of each other, the cheaper.
                p_eff = p.p_meet * (1.0 - penalty)
                key = (tier, -(floor(p_eff * 10.0) / 10.0), latency_step(lat), cost, lat,
                       c.deployment)
                score = (2.0 - tier) + p_eff * 0.999
        elif objective == "min_latency":
            eff = lat / max(1.0 - p.error_rate, 0.05) * (1.0 + penalty)
            key = (2 if unhealthy else 1 if failing else 0, eff, cost, c.deployment)
            score = -eff
        else:
            ref = lat_target if lat_target is not None else max(lat, 1e-3)
            score = (weights.slo * (p.p_meet * (1.0 - penalty))
                     - weights.cost * (cost / max_cost if max_cost > 0.0 else 0.0)
                     - weights.latency * lat / ref)
            key = (2 if unhealthy else 1 if failing else 0, -score, cost, c.deployment)
        rows.append((key, score, c, p, failures, tier))
    rows.sort(key=_sort_key)
    scored = [_new(ScoredCandidate, (c.deployment, i, score, tier == 0, c.slo_penalty > 0.0,
                                     c.unhealthy, False, p, tuple(failures)))
              for i, (_, score, c, p, failures, tier) in enumerate(rows)]
    pick = _explore_pick(scored, request, config, rng)
    if pick is not None:
        chosen = scored.pop(pick)
        scored.insert(0, chosen)
        scored = [_reranked(s, i, explored=(i == 0)) for i, s in enumerate(scored)]
    return _new(Ranking, (config.objective, out_tokens, tuple(scored), pick is not None))


def _reranked(s: ScoredCandidate, rank_: int, explored: bool) -> ScoredCandidate:
    return s._replace(rank=rank_, explored=explored)
