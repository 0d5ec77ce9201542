"""Pure ranking of candidates for one request under the policy's objective, with exploration.

Tiers first: 0 = predicted to meet every SLO target (TTFT p95, TPOT p95, E2E p99, and an error
rate not significantly above the availability budget), healthy and not demoted; 1 = healthy but
not meeting (or demoted); 2 = unhealthy (circuit open), kept last so a request is still served
when nothing else is left. Within tiers, by objective:
- `min_cost`: tier 0 by expected cost, ties by latency; other tiers by `P(meet) * (1 - penalty)`.
- `min_latency`: by the latency at the SLO percentile (TTFT p95 when streaming, else E2E p99)
  divided by the success rate, times `1 + penalty`.
- `weighted`: by utility `w_slo * P(meet) * (1 - penalty) - w_cost * cost / max cost
  - w_latency * latency / latency target`.
Exploration: with probability `explore_share` (never for `high` risk) the first place goes to a
stale candidate (fewer than `fresh_n` effective observations), drawn with weight `1 / (1 + n)`.
The clock (`now`) and the random source (`rng`) are arguments.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

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

SortKey = tuple[int, float, float, str]


def _failures(p: Prediction, c: Candidate, targets: SloTargets, output_tokens: int) -> list[str]:
    """Why a candidate is not in tier 0, as short codes (numbers are in its prediction)."""
    out: list[str] = []
    if targets.ttft_p95_s is not None and p.ttft_q_s > targets.ttft_p95_s:
        out.append("ttft_p95_over_target")
    if targets.tpot_p95_s is not None and output_tokens > 1 and p.tpot_q_s > targets.tpot_p95_s:
        out.append("tpot_p95_over_target")
    if targets.e2e_p99_s is not None and p.e2e_q_s > targets.e2e_p99_s:
        out.append("e2e_p99_over_target")
    if p.error_rate_low > 1.0 - targets.availability:
        out.append("error_rate_over_budget")
    if c.slo_penalty > 0.0:
        out.append("demoted_by_burn_rate")
    if c.unhealthy:
        out.append("unhealthy")
    return out


def _tier(c: Candidate, failures: list[str]) -> int:
    if c.unhealthy:
        return 2
    return 1 if failures else 0


def _latency(p: Prediction, stream: bool) -> float:
    return p.ttft_q_s if stream else p.e2e_q_s


def _key_and_score(c: Candidate, p: Prediction, tier: int, request: ScoreRequest,
                   targets: SloTargets, config: ScoringConfig,
                   max_cost: float) -> tuple[SortKey, float]:
    lat = _latency(p, request.stream)
    p_eff = p.p_meet * (1.0 - c.slo_penalty)
    cost_share = p.cost_usd / max_cost if max_cost > 0.0 else 0.0
    if config.objective == "min_cost":
        if tier == 0:
            return (0, p.cost_usd, lat, c.deployment), 2.0 + (1.0 - cost_share)
        # Chances within the same tenth count as equal, so when nobody is likely to meet the
        # SLO the faster prediction wins (not the wider distribution), then the cheaper.
        chance = math.floor(p_eff * 10.0) / 10.0
        return (tier, -chance, lat + p.cost_usd * 1e-9, c.deployment), (2.0 - tier) + p_eff * 0.999
    if config.objective == "min_latency":
        eff = lat / max(1.0 - p.error_rate, 0.05) * (1.0 + c.slo_penalty)
        return (2 if c.unhealthy else 0, eff, p.cost_usd, c.deployment), -eff
    w = config.weights
    target = targets.ttft_p95_s if request.stream else targets.e2e_p99_s
    ref = target if target is not None else max(lat, 1e-3)
    utility = w.slo * p_eff - w.cost * cost_share - w.latency * lat / ref
    return (2 if c.unhealthy else 0, -utility, p.cost_usd, c.deployment), utility


def _explore_pick(scored: list[ScoredCandidate], request: ScoreRequest, config: ScoringConfig,
                  rng: random.Random) -> int | None:
    if request.risk == "high" or config.explore_share <= 0.0 or len(scored) < 2:
        return None
    if rng.random() >= config.explore_share:
        return None
    stale = [(i, 1.0 / (1.0 + s.prediction.n_eff)) for i, s in enumerate(scored)
             if i > 0 and not s.unhealthy and s.prediction.n_eff < config.fresh_n]
    if not stale:
        return None
    draw = rng.random() * sum(w for _, w in stale)
    for i, w in stale:
        draw -= w
        if draw <= 0.0:
            return i
    return stale[-1][0]


def rank(request: ScoreRequest, targets: SloTargets, candidates: Sequence[Candidate],
         config: ScoringConfig, *, now: float, rng: random.Random,
         output_history: Quantiles | None = None) -> Ranking:
    """Rank `candidates` best first for `request`; pure given `now` and `rng`."""
    out_tokens = expected_output_tokens(request.max_tokens, output_history, config)
    logs = log_targets(targets)
    preds = [predict(c, request, out_tokens, targets, config, now, logs) for c in candidates]
    max_cost = max((p.cost_usd for p in preds), default=0.0)
    rows: list[tuple[SortKey, float, Candidate, Prediction, list[str], int]] = []
    for c, p in zip(candidates, preds, strict=True):
        failures = _failures(p, c, targets, out_tokens)
        tier = _tier(c, failures)
        key, score = _key_and_score(c, p, tier, request, targets, config, max_cost)
        rows.append((key, score, c, p, failures, tier))
    rows.sort(key=lambda r: r[0])
    scored = [ScoredCandidate(deployment=c.deployment, rank=i, score=score, meets_slo=tier == 0,
                              demoted=c.slo_penalty > 0.0, unhealthy=c.unhealthy, explored=False,
                              prediction=p, reasons=tuple(failures))
              for i, (_, score, c, p, failures, tier) in enumerate(rows)]
    pick = _explore_pick(scored, request, config, rng)
    if pick is not None:
        chosen = scored.pop(pick)
        scored.insert(0, chosen)
        scored = [_reranked(s, i, explored=(i == 0)) for i, s in enumerate(scored)]
    return Ranking(objective=config.objective, output_tokens=out_tokens,
                   candidates=tuple(scored), explored=pick is not None)


def _reranked(s: ScoredCandidate, rank_: int, explored: bool) -> ScoredCandidate:
    return s._replace(rank=rank_, explored=explored)
