"""The reference implementation of scoring: the maths of `predict.py` and `rank.py` written
plainly, one helper per step (as it was before the hot path was flattened).

Not used by the service. Kept as the oracle: `tests/stats/test_scoring_equivalence.py` checks
that `router.scoring.rank` returns exactly what `reference_rank` returns (same order, same
floats, same random draws), and `bench/scoring.py` times both side by side.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from router.scoring.predict import _share_below_log, expected_output_tokens, log_targets
from router.scoring.rank import _explore_pick, latency_step
from router.scoring.types import (
    Candidate,
    Prediction,
    Prior,
    Ranking,
    ScoredCandidate,
    ScoreRequest,
    ScoringConfig,
    Source,
)
from router.slo.targets import SloTargets
from router.stats.estimators import KeySummary
from router.stats.quantiles import LogQ, Quantiles, blend_logs
from router.stats.store import StatsView

Z95 = 1.6448536269514722
Z99 = 2.3263478740408408




def _w(n: float, n0: float) -> float:
    return n / (n + n0) if n > 0.0 else 0.0


def _factor(level: KeySummary | None, now: float) -> float:
    """Decay of `level`'s weights from its summary time to `now`."""
    if level is None or now <= level.at:
        return 1.0
    return math.pow(2.0, -(now - level.at) / level.half_life_s)


def predict_ttft(stats: StatsView, prompt_tokens: int, prior: Prior,
                 now: float) -> tuple[LogQ, Source]:
    """Log TTFT quantiles for this prompt size, and the finest level that informed them."""
    est: LogQ = prior.ttft.logs
    source: Source = "prior"
    d = stats.deployment_all
    if d is not None and d.ttft_fit is not None:
        fitted = d.ttft_fit.predict_logs(prompt_tokens)
        trust = d.ttft_fit.trust(prompt_tokens)
        if fitted is not None and trust > 0.0:
            n = d.ttft_fit.weight * _factor(d, now) * trust
            est, source = blend_logs(fitted, est, _w(n, prior.weight)), "model"
    b = stats.bucket
    if b is not None and b.ttft is not None:
        n = (b.n_ok - b.n_unstreamed) * _factor(b, now)
        est, source = blend_logs(b.ttft.logs, est, _w(n, prior.weight)), "bucket"
    return est, source


def bucket_observations(stats: StatsView, now: float, stream: bool = True) -> float:
    """Decayed observations at this prompt size (deployment x task x prompt bucket) of what
    the request is scored on: TTFT (streamed answers), else E2E (non-streamed ones)."""
    b = stats.bucket
    if b is None:
        return 0.0
    if not stream:
        return b.n_unstreamed * _factor(b, now) if b.e2e is not None else 0.0
    return (b.n_ok - b.n_unstreamed) * _factor(b, now) if b.ttft is not None else 0.0


def predict_unstreamed_e2e(stats: StatsView, prior: Prior, now: float,
                           bound: tuple[float, float, float], wait: float) -> tuple[float, float]:
    """A non-streamed request's E2E p50 and p99: the TTFT + TPOT `bound` (p50, p95, p99)
    shrunk towards the E2E of non-streamed answers, deployment x task then bucket; at least
    `wait` once that is past the p95."""
    e50, e95, e99 = bound
    levels = [level for level in (stats.task, stats.bucket)
              if level is not None and level.e2e is not None]
    if levels:
        l50, l95, l99 = (math.log(v) for v in bound)
        for level in levels:
            assert level.e2e is not None
            w = _w(level.n_unstreamed * _factor(level, now), prior.weight)
            q = level.e2e.logs
            l50, l95, l99 = (w * q[0] + (1.0 - w) * l50, w * q[2] + (1.0 - w) * l95,
                             w * q[3] + (1.0 - w) * l99)
        e50, e95, e99 = math.exp(l50), math.exp(l95), math.exp(l99)
    if wait > e95:
        e50, e99 = wait, max(e99, wait)
    return e50, e99


def predict_tpot(stats: StatsView, prior: Prior, now: float,
                 factors: tuple[float, float]) -> LogQ:
    """Log TPOT quantiles, shrunk from the prior through deployment to deployment x task."""
    est = prior.tpot.logs
    for level, f in zip((stats.deployment_all, stats.task), factors, strict=True):
        if level is not None and level.tpot is not None:
            n = (level.n_ok - level.n_unstreamed) * f
            est = blend_logs(level.tpot.logs, est, _w(n, prior.weight))
    return est


def predict_errors(stats: StatsView, prior: Prior, z: float,
                   factors: tuple[float, float]) -> tuple[float, float]:
    """Decayed error rate (shrunk like the latencies) and its one-sided lower bound."""
    rate, n0, total = prior.error_rate, prior.weight, 0.0
    for level, f in zip((stats.deployment_all, stats.task), factors, strict=True):
        if level is not None:
            ok, err = level.n_ok * f, level.n_err * f
            rate = (err + n0 * rate) / (ok + err + n0)
            total = ok + err
    low = rate - z * math.sqrt(rate * (1.0 - rate) / (total + n0))
    return rate, max(low, 0.0)










def _share(log_target: float | None, log50: float, logq: float, zq: float) -> float:
    return 1.0 if log_target is None else _share_below_log(log_target, log50, logq, zq)


def reference_predict(candidate: Candidate, request: ScoreRequest, output_tokens: int,
            targets: SloTargets, config: ScoringConfig, now: float,
            logs: tuple[float | None, float | None, float | None] | None = None) -> Prediction:
    """Everything the ranking needs about one candidate for one request."""
    lt = logs if logs is not None else log_targets(targets)
    prior = candidate.prior if candidate.prior is not None else config.prior
    stats = candidate.stats
    factors = (_factor(stats.deployment_all, now), _factor(stats.task, now))
    ttft_l, source = predict_ttft(stats, request.prompt_tokens, prior, now)
    tpot_l = predict_tpot(stats, prior, now, factors)
    exp = math.exp
    ttft_50, ttft_q, ttft_99 = exp(ttft_l[0]), exp(ttft_l[2]), exp(ttft_l[3])
    tpot_50, tpot_99 = exp(tpot_l[0]), exp(tpot_l[3])
    log_ttft_50, log_ttft_q = ttft_l[0], ttft_l[2]
    stream = request.stream
    waiting = [stats.oldest_waiting_since]
    if not stream:  # a non-streamed attempt waits for its whole answer
        waiting.append(stats.oldest_unstreamed_since)
    since = min((t for t in waiting if t is not None), default=None)
    wait = now - since if since is not None else 0.0
    if stream and wait > ttft_q:  # waiting past the p95: at least `wait` at every percentile
        ttft_50 = ttft_q = wait
        ttft_99 = max(ttft_99, wait)
        log_ttft_50 = log_ttft_q = math.log(wait)
    steps = output_tokens - 1 if output_tokens > 1 else 0
    e2e_50 = ttft_50 + tpot_50 * steps
    e2e_q = ttft_99 + tpot_99 * steps
    err, err_low = predict_errors(stats, prior, config.error_z, factors)
    if stream:
        shares = (_share(lt[0], log_ttft_50, log_ttft_q, Z95)
                  * (_share(lt[1], tpot_l[0], tpot_l[2], Z95) if steps else 1.0))
    else:  # the whole answer is its first content: E2E only
        bound = (e2e_50, ttft_q + exp(tpot_l[2]) * steps, e2e_q)
        e2e_50, e2e_q = predict_unstreamed_e2e(stats, prior, now, bound, wait)
        shares = 1.0
    p_meet = shares * _share(lt[2], math.log(e2e_50), math.log(e2e_q), Z99) * (1.0 - err)
    cost = (request.prompt_tokens * candidate.price_in_per_m
            + request.completions * output_tokens * candidate.price_out_per_m) / 1e6
    return Prediction(
        ttft_p50_s=ttft_50, ttft_q_s=ttft_q, tpot_q_s=exp(tpot_l[2]), e2e_p50_s=e2e_50,
        e2e_q_s=e2e_q, error_rate=err, error_rate_low=err_low, p_meet=p_meet, cost_usd=cost,
        n_eff=bucket_observations(stats, now, stream), source=source,
        censored_wait_s=wait,
    )


SortKey = tuple[int | float | str, ...]  # compared only within one objective and tier


def _failures(p: Prediction, c: Candidate, targets: SloTargets, output_tokens: int,
              stream: bool) -> list[str]:
    """Why a candidate is not in tier 0, as short codes (numbers are in its prediction); a
    non-streamed request is held to E2E and availability only."""
    out: list[str] = []
    if stream and targets.ttft_p95_s is not None and p.ttft_q_s > targets.ttft_p95_s:
        out.append("ttft_p95_over_target")
    if (stream and targets.tpot_p95_s is not None and output_tokens > 1
            and p.tpot_q_s > targets.tpot_p95_s):
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
        # SLO the faster prediction wins (not the wider distribution), then, among latencies
        # within 10% of each other, the cheaper.
        chance = math.floor(p_eff * 10.0) / 10.0
        return ((tier, -chance, latency_step(lat), p.cost_usd, lat, c.deployment),
                (2.0 - tier) + p_eff * 0.999)
    # min_latency and weighted: unhealthy last, failing over the availability budget before it
    lead = 2 if c.unhealthy else 1 if p.error_rate_low > 1.0 - targets.availability else 0
    if config.objective == "min_latency":
        eff = lat / max(1.0 - p.error_rate, 0.05) * (1.0 + c.slo_penalty)
        return (lead, eff, p.cost_usd, c.deployment), -eff
    w = config.weights
    target = targets.ttft_p95_s if request.stream else targets.e2e_p99_s
    ref = target if target is not None else max(lat, 1e-3)
    utility = w.slo * p_eff - w.cost * cost_share - w.latency * lat / ref
    return (lead, -utility, p.cost_usd, c.deployment), utility




def reference_rank(request: ScoreRequest, targets: SloTargets, candidates: Sequence[Candidate],
         config: ScoringConfig, *, now: float, rng: random.Random,
         output_history: Quantiles | None = None) -> Ranking:
    """Rank `candidates` best first for `request`; pure given `now` and `rng`."""
    out_tokens = expected_output_tokens(request.max_tokens, output_history, config)
    logs = log_targets(targets)
    preds = [reference_predict(c, request, out_tokens, targets, config, now, logs)
             for c in candidates]
    max_cost = max((p.cost_usd for p in preds), default=0.0)
    rows: list[tuple[SortKey, float, Candidate, Prediction, list[str], int]] = []
    for c, p in zip(candidates, preds, strict=True):
        failures = _failures(p, c, targets, out_tokens, request.stream)
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
