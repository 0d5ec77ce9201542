"""Pure per-candidate predictions: TTFT, TPOT and E2E at the SLO percentiles, P(meet), cost.

Estimates are shrunk level by level, in log space, from the prior towards the data:
TTFT: prior -> deployment TTFT model at this prompt size -> deployment x task x prompt bucket;
TPOT: prior -> deployment -> deployment x task; errors: prior -> deployment -> deployment x task,
each step weighted `n / (n + n0)` with `n` the decayed number of observations and `n0` the prior's
weight. E2E at a percentile is the comonotone bound `TTFT_q + TPOT_q * (output_tokens - 1)`.
`P(meet)` treats TTFT, TPOT and E2E as log-normal through their p50 and SLO-percentile values and
multiplies the three shares with the success rate. An attempt that has waited for its first token
longer than the predicted TTFT p95 raises the TTFT to its age at every percentile (a censored
observation: the deployment may be stalled).
A non-streamed request (its first content is the whole answer) is predicted on E2E alone: that
bound, shrunk towards the E2E of non-streamed answers (deployment x task, then prompt bucket),
its share below the E2E target times the success rate; its TTFT and TPOT are shown, not judged.
Any attempt waiting (for a first token, or a non-streamed one for its answer) longer than that
E2E p95 raises its E2E to the age.
No I/O, no clocks: `now` comes in.

Hot path: `predict` runs once per candidate per request (ten candidates within the 0.2 ms
budget, `bench/scoring.py`), so it is one flat function over local floats: no helper calls, no
intermediate tuples, and the p90 level (which no prediction uses) is never blended. What no
request changes (levels' weights, TPOT and error estimates) is `blend`ed apart, so the service
can reuse it across requests for a short while (`blend_cache.py`). The same
maths written one helper per step is `router/scoring/reference.py`; the tests check that both
give bit-identical predictions, so change them together.
"""

from __future__ import annotations

import math

from router.scoring.types import (
    Blend,
    Candidate,
    Prediction,
    Prior,
    ScoreRequest,
    ScoringConfig,
    Source,
)
from router.slo.targets import SloTargets
from router.stats.estimators import KeySummary
from router.stats.quantiles import Quantiles
from router.stats.store import StatsView
from router.stats.ttft_model import KTOK, MIN_FITTED_S

Z95 = 1.6448536269514722
Z99 = 2.3263478740408408
SQRT2 = math.sqrt(2.0)

_exp = math.exp
_log = math.log
_pow = math.pow
_erf = math.erf
_sqrt = math.sqrt
# `NamedTuple(...)` runs a generated Python `__new__` (~0.6 us for 12 fields); building the
# tuple directly skips it. Only with every field given, in order.
_new = tuple.__new__


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


def _share_below_log(log_target: float, log50: float, logq: float, zq: float) -> float:
    if logq <= log50 + 1e-9:
        return 1.0 if logq <= log_target else 0.0
    sigma = (logq - log50) / zq
    return 0.5 * (1.0 + math.erf((log_target - log50) / (sigma * SQRT2)))


def share_below(target: float | None, p50: float, pq: float, zq: float) -> float:
    """P(X <= target) for a log-normal X through its median `p50` and quantile `pq` at `zq`."""
    if target is None:
        return 1.0
    if p50 <= 0.0 or target <= 0.0:
        return 1.0 if pq <= target else 0.0
    return _share_below_log(math.log(target), math.log(p50), math.log(max(pq, p50)), zq)


def log_targets(targets: SloTargets) -> tuple[float | None, float | None, float | None]:
    """Logs of the TTFT, TPOT and E2E targets (computed once per ranking)."""
    return (_log_or_none(targets.ttft_p95_s), _log_or_none(targets.tpot_p95_s),
            _log_or_none(targets.e2e_p99_s))


def _log_or_none(value: float | None) -> float | None:
    return math.log(value) if value is not None and value > 0.0 else None


def _tpot_level(level: KeySummary, factor: float, n0: float, p50: float, p95: float,
                p99: float, rate: float) -> tuple[float, float, float, float, float]:
    """One level (deployment, then deployment x task) blended over the TPOT log quantiles and
    the error rate so far; also the level's effective event count."""
    ok = level.n_ok * factor
    q = level.tpot
    if q is not None:
        n = (level.n_ok - level.n_unstreamed) * factor  # streamed answers: TPOT's samples
        w = n / (n + n0) if n > 0.0 else 0.0
        u = 1.0 - w
        ql = q.logs
        p50 = w * ql[0] + u * p50
        p95 = w * ql[2] + u * p95
        p99 = w * ql[3] + u * p99
    err = level.n_err * factor
    return p50, p95, p99, (err + n0 * rate) / (ok + err + n0), ok + err


def blend(stats: StatsView, prior: Prior, error_z: float, now: float) -> Blend:
    """The request-independent part of a prediction for `stats`, its weights decayed to `now`."""
    n0 = prior.weight
    dep = stats.deployment_all
    task = stats.task
    # Decay of each level's weights from its summary time to `now`.
    f_dep = 1.0 if dep is None or now <= dep.at else _pow(2.0, -(now - dep.at) / dep.half_life_s)
    f_task = (1.0 if task is None or now <= task.at
              else _pow(2.0, -(now - task.at) / task.half_life_s))
    pl = prior.ttft.logs
    prior_ttft = (pl[0], pl[2], pl[3])

    fit = dep.ttft_fit if dep is not None else None
    fit_n = fit_w = 0.0
    fit_ratio = prior_ttft
    if fit is not None and fit.ratio is not None:
        fit_n = fit.weight * f_dep
        fit_w = fit_n / (fit_n + n0) if fit_n > 0.0 else 0.0
        r = fit.ratio.logs
        fit_ratio = (r[0], r[2], r[3])
    else:
        fit = None

    bucket = stats.bucket
    bucket_w = e2e_bucket_w = e2e_task_w = -1.0
    bucket_ttft = e2e_bucket = e2e_task = prior_ttft
    n = n_e2e = 0.0
    if bucket is not None:
        at = bucket.at
        f_b = 1.0 if now <= at else _pow(2.0, -(now - at) / bucket.half_life_s)
        if bucket.ttft is not None:
            n = (bucket.n_ok - bucket.n_unstreamed) * f_b  # streamed answers: TTFT's samples
            bucket_w = n / (n + n0) if n > 0.0 else 0.0
            bl = bucket.ttft.logs
            bucket_ttft = (bl[0], bl[2], bl[3])
        if bucket.e2e is not None:
            n_e2e = bucket.n_unstreamed * f_b
            e2e_bucket_w = n_e2e / (n_e2e + n0) if n_e2e > 0.0 else 0.0
            el = bucket.e2e.logs
            e2e_bucket = (el[0], el[2], el[3])
    if task is not None and task.e2e is not None:
        m = task.n_unstreamed * f_task
        e2e_task_w = m / (m + n0) if m > 0.0 else 0.0
        el = task.e2e.logs
        e2e_task = (el[0], el[2], el[3])

    # TPOT (log p50, p95, p99) and the error rate: prior -> deployment -> deployment x task.
    pl = prior.tpot.logs
    p50, p95, p99 = pl[0], pl[2], pl[3]
    rate, total = prior.error_rate, 0.0
    if dep is not None:
        p50, p95, p99, rate, total = _tpot_level(dep, f_dep, n0, p50, p95, p99, rate)
    if task is not None:
        p50, p95, p99, rate, total = _tpot_level(task, f_task, n0, p50, p95, p99, rate)
    err_low = rate - error_z * _sqrt(rate * (1.0 - rate) / (total + n0))
    if err_low < 0.0:
        err_low = 0.0
    return _new(Blend, (now, n0, prior_ttft, fit, fit_n, fit_w, fit_ratio, bucket_w, bucket_ttft,
                        (p50, p95, p99), (_exp(p50), _exp(p95), _exp(p99)), rate, err_low, n,
                        e2e_task_w, e2e_task, e2e_bucket_w, e2e_bucket, n_e2e))


def unstreamed_e2e(b: Blend, e50: float, e95: float, e99: float,
                   wait: float) -> tuple[float, float]:
    """A non-streamed request's E2E p50 and p99: the bound from TTFT and TPOT (`e50`, `e95`,
    `e99`, seconds) shrunk in log space towards the E2E of non-streamed answers at deployment x
    task, then at the prompt bucket; then at least `wait` (the age of the oldest attempt
    waiting) once that is past the p95, as for a TTFT."""
    if b.e2e_task_w >= 0.0 or b.e2e_bucket_w >= 0.0:  # else the bound as it is
        l50, l95, l99 = _log(e50), _log(e95), _log(e99)
        for w, q in ((b.e2e_task_w, b.e2e_task), (b.e2e_bucket_w, b.e2e_bucket)):
            if w >= 0.0:
                u = 1.0 - w
                l50 = w * q[0] + u * l50
                l95 = w * q[1] + u * l95
                l99 = w * q[2] + u * l99
        e50, e95, e99 = _exp(l50), _exp(l95), _exp(l99)
    if wait > e95:
        e50 = wait
        if wait > e99:
            e99 = wait
    return e50, e99


def predict(candidate: Candidate, request: ScoreRequest, output_tokens: int,
            targets: SloTargets, config: ScoringConfig, now: float,
            logs: tuple[float | None, float | None, float | None] | None = None) -> Prediction:
    """Everything the ranking needs about one candidate for one request.

    The candidate's `blend` when it carries one (decayed to its own time), else one made now.
    Operation for operation the same arithmetic as `reference.reference_predict` (so the floats
    are identical for a blend made at `now`), written out flat: `w * child + (1 - w) * parent`
    per level and quantile.
    """
    lt = logs if logs is not None else log_targets(targets)
    b = candidate.blend
    if b is None:
        prior = candidate.prior
        b = blend(candidate.stats, prior if prior is not None else config.prior,
                  config.error_z, now)
    (_, n0, (t50, t95, t99), fit, fit_n, fit_w, r, bucket_w, bl, (p50, p95, _),
     (tpot_50, tpot_q, tpot_99), rate, err_low, n_eff, _, _, _, _, _) = b

    # TTFT (log p50, p95, p99): prior -> deployment model at this prompt size -> bucket.
    source: Source = "prior"
    if fit is not None:
        prompt = request.prompt_tokens
        if fit.covers_from_ktok <= prompt / KTOK <= fit.covers_to_ktok:
            trust, w = 1.0, fit_w
        else:
            trust = fit.trust(prompt)
            n = fit_n * trust
            w = n / (n + n0) if n > 0.0 else 0.0
        if trust > 0.0:
            shift = _log(max(fit.intercept_s + fit.slope_s_per_ktok * prompt / KTOK,
                             MIN_FITTED_S))
            u = 1.0 - w
            t50 = w * (r[0] + shift) + u * t50
            t95 = w * (r[1] + shift) + u * t95
            t99 = w * (r[2] + shift) + u * t99
            source = "model"
    if bucket_w >= 0.0:
        w = bucket_w
        u = 1.0 - w
        t50 = w * bl[0] + u * t50
        t95 = w * bl[1] + u * t95
        t99 = w * bl[2] + u * t99
        source = "bucket"

    ttft_50, ttft_q, ttft_99 = _exp(t50), _exp(t95), _exp(t99)
    log_ttft_q = t95
    stats = candidate.stats
    since = stats.oldest_waiting_since
    stream = request.stream
    if not stream:  # a non-streamed attempt waits for its whole answer: E2E only
        whole = stats.oldest_unstreamed_since
        if whole is not None and (since is None or whole < since):
            since = whole
    wait = now - since if since is not None else 0.0
    if stream and wait > ttft_q:
        # An attempt has waited past the predicted p95: the TTFT is taken as at least its age
        # at every percentile for now (P(meet) 0 once that is past the target). A p99 raised
        # by a few slow answers must not hide a stall that the p95 does not show yet.
        ttft_50 = ttft_q = wait
        if wait > ttft_99:
            ttft_99 = wait
        t50 = log_ttft_q = _log(wait)
    steps = output_tokens - 1 if output_tokens > 1 else 0
    e2e_50 = ttft_50 + tpot_50 * steps
    e2e_q = ttft_99 + tpot_99 * steps

    # P(meet): log-normal shares below each target, times the success rate.
    if not stream:
        e2e_50, e2e_q = unstreamed_e2e(b, e2e_50, ttft_q + tpot_q * steps, e2e_q, wait)
        n_eff = b.n_e2e
        s_ttft = s_tpot = 1.0
    else:
        target = lt[0]
        if target is None:
            s_ttft = 1.0
        elif log_ttft_q <= t50 + 1e-9:
            s_ttft = 1.0 if log_ttft_q <= target else 0.0
        else:
            s_ttft = 0.5 * (1.0 + _erf((target - t50) / ((log_ttft_q - t50) / Z95 * SQRT2)))
        target = lt[1]
        if not steps or target is None:
            s_tpot = 1.0
        elif p95 <= p50 + 1e-9:
            s_tpot = 1.0 if p95 <= target else 0.0
        else:
            s_tpot = 0.5 * (1.0 + _erf((target - p50) / ((p95 - p50) / Z95 * SQRT2)))
    target = lt[2]
    if target is None:
        s_e2e = 1.0
    else:
        e50, eq = _log(e2e_50), _log(e2e_q)
        if eq <= e50 + 1e-9:
            s_e2e = 1.0 if eq <= target else 0.0
        else:
            s_e2e = 0.5 * (1.0 + _erf((target - e50) / ((eq - e50) / Z99 * SQRT2)))
    p_meet = s_ttft * s_tpot * s_e2e * (1.0 - rate)
    cost = (request.prompt_tokens * candidate.price_in_per_m
            + request.completions * output_tokens * candidate.price_out_per_m) / 1e6
    return _new(Prediction, (ttft_50, ttft_q, tpot_q, e2e_50, e2e_q, rate, err_low, p_meet,
                             cost, n_eff, source, wait))
