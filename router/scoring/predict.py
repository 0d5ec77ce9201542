"""Pure per-candidate predictions: TTFT, TPOT and E2E at the SLO percentiles, P(meet), cost.

Estimates are shrunk level by level, in log space, from the prior towards the data:
TTFT: prior -> deployment TTFT model at this prompt size -> deployment x task x prompt bucket;
TPOT: prior -> deployment -> deployment x task; errors: prior -> deployment -> deployment x task,
each step weighted `n / (n + n0)` with `n` the decayed number of observations and `n0` the prior's
weight. E2E at a percentile is the comonotone bound `TTFT_q + TPOT_q * (output_tokens - 1)`.
`P(meet)` treats TTFT, TPOT and E2E as log-normal through their p50 and SLO-percentile values and
multiplies the three shares with the success rate. An attempt that has waited for its first token
longer than the predicted TTFT p99 raises the TTFT tail to its age (a censored observation).
No I/O, no clocks: `now` comes in.
"""

from __future__ import annotations

import math

from router.scoring.types import Candidate, Prediction, Prior, ScoreRequest, ScoringConfig, Source
from router.slo.targets import SloTargets
from router.stats.estimators import KeySummary
from router.stats.quantiles import Quantiles, blend
from router.stats.store import StatsView

Z95 = 1.6448536269514722
Z99 = 2.3263478740408408
SQRT2 = math.sqrt(2.0)


def expected_output_tokens(max_tokens: int | None, history: Quantiles | None,
                           config: ScoringConfig) -> int:
    """Output tokens to plan for: the task's history quantile, capped by `max_tokens`."""
    seen = round(history.at(config.output_quantile)) if history is not None else None
    if seen is not None and max_tokens is not None:
        return max(min(seen, max_tokens), 1)
    if seen is not None:
        return max(seen, 1)
    if max_tokens is not None:
        return max(max_tokens, 1)
    return config.default_output_tokens


def _w(n: float, n0: float) -> float:
    return n / (n + n0) if n > 0.0 else 0.0


def predict_ttft(stats: StatsView, prompt_tokens: int, prior: Prior,
                 now: float) -> tuple[Quantiles, Source]:
    """TTFT quantiles for this prompt size, and the finest level that informed them."""
    est: Quantiles = prior.ttft
    source: Source = "prior"
    d = stats.deployment_all
    if d is not None and d.ttft_fit is not None:
        fitted = d.ttft_fit.predict(prompt_tokens)
        if fitted is not None:
            n = d.decayed(d.ttft_fit.weight, now)
            est, source = _blended(fitted, est, _w(n, prior.weight)), "model"
    b = stats.bucket
    if b is not None and b.ttft is not None:
        est, source = _blended(b.ttft, est, _w(b.n(now), prior.weight)), "bucket"
    return est, source


def predict_tpot(stats: StatsView, prior: Prior, now: float) -> Quantiles:
    """TPOT quantiles, shrunk from the prior through deployment to deployment x task."""
    est = prior.tpot
    for level in (stats.deployment_all, stats.task):
        if level is not None and level.tpot is not None:
            est = _blended(level.tpot, est, _w(level.n(now), prior.weight))
    return est


def predict_errors(stats: StatsView, prior: Prior, now: float, z: float) -> tuple[float, float]:
    """Decayed error rate (shrunk like the latencies) and its one-sided lower bound."""
    rate, n0, total = prior.error_rate, prior.weight, 0.0
    for level in (stats.deployment_all, stats.task):
        if level is not None:
            ok, err = level.n(now), level.decayed(level.n_err, now)
            rate = (err + n0 * rate) / (ok + err + n0)
            total = ok + err
    low = rate - z * math.sqrt(rate * (1.0 - rate) / (total + n0))
    return rate, max(low, 0.0)


def _blended(child: Quantiles, parent: Quantiles, w: float) -> Quantiles:
    out = blend(child, parent, w)
    return out if out is not None else parent


def share_below(target: float | None, p50: float, pq: float, zq: float) -> float:
    """P(X <= target) for a log-normal X through its median `p50` and quantile `pq` at `zq`."""
    if target is None:
        return 1.0
    if p50 <= 0.0 or pq <= p50 * (1.0 + 1e-9):
        return 1.0 if pq <= target else 0.0
    sigma = math.log(pq / p50) / zq
    return 0.5 * (1.0 + math.erf(math.log(target / p50) / (sigma * SQRT2)))


def predict(candidate: Candidate, request: ScoreRequest, output_tokens: int,
            targets: SloTargets, config: ScoringConfig, now: float) -> Prediction:
    """Everything the ranking needs about one candidate for one request."""
    prior = candidate.prior if candidate.prior is not None else config.prior
    stats = candidate.stats
    ttft, source = predict_ttft(stats, request.prompt_tokens, prior, now)
    tpot = predict_tpot(stats, prior, now)
    wait = now - stats.oldest_waiting_since if stats.oldest_waiting_since is not None else 0.0
    ttft_q, ttft_99 = ttft.p95, ttft.p99
    if wait > ttft_99:
        ttft_q, ttft_99 = max(ttft_q, wait), wait
    steps = max(output_tokens - 1, 0)
    e2e_50 = ttft.p50 + tpot.p50 * steps
    e2e_q = ttft_99 + tpot.p99 * steps
    err, err_low = predict_errors(stats, prior, now, config.error_z)
    p_meet = (share_below(targets.ttft_p95_s, ttft.p50, ttft_q, Z95)
              * (share_below(targets.tpot_p95_s, tpot.p50, tpot.p95, Z95) if steps else 1.0)
              * share_below(targets.e2e_p99_s, e2e_50, e2e_q, Z99) * (1.0 - err))
    cost = (request.prompt_tokens * candidate.price_in_per_m
            + output_tokens * candidate.price_out_per_m) / 1e6
    n_eff = _n(stats.task, now)
    return Prediction(
        ttft_p50_s=ttft.p50, ttft_q_s=ttft_q, tpot_q_s=tpot.p95, e2e_p50_s=e2e_50,
        e2e_q_s=e2e_q, error_rate=err, error_rate_low=err_low, p_meet=p_meet, cost_usd=cost,
        n_eff=n_eff, source=source, censored_wait_s=wait,
    )


def _n(level: KeySummary | None, now: float) -> float:
    return level.n(now) if level is not None else 0.0
