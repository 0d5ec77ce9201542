"""Experiment statistics by simulation: A/A false positives under peeking, detection sizes.

Runs the production mSPRT (`router.experiments.sequential.msprt_arrays`, the function behind
`GET /v1/experiments`) on simulated experiments, vectorised over runs and checks with numpy, with
the service's gating (`min_sample` per arm before the test may fire). Two tables:

1. **A/A**: `--runs` experiments with no difference, checked after every `--batch` values per
   arm up to `--per-arm` (continuous monitoring). The share of experiments that ever reject is
   printed against alpha (the acceptance bound is alpha + 2 points), for log TTFT, a 5% error
   rate and a heavy-tailed cost; beside it the naive z-test at the same checks (what peeking
   does to a fixed-horizon test) and the z-test at the last check only.
2. **Detection**: for a 10/20/30% lower TTFT at several lognormal spreads, the total requests
   (both arms, 50/50) at which the mSPRT rejects with the right sign (median, p95, share
   detected), beside the fixed-horizon sample size for 80% power.

    .venv/bin/python -m bench.experiments_sim [--runs 100] [--per-arm 5000] [--batch 10]
        [--detection-runs 200] [--seed 1] [--service-replications 10]

3. With `--service-replications N`: N independent experiments (one per task, so one router
   process holds them all) of the acceptance test's kind at a real router and simulator
   (TTFT median 120 vs 96 ms, p99 3x): requests until the mSPRT read from
   `GET /v1/experiments` rejects, with the ratio, and whether the bootstrap p50 interval
   excludes 0 at that moment. The router's own overhead is in both arms.

4. With `--guardrails` (only this table): the production `check_guardrail` on simulated arms,
   looked at every `--guardrail-every` outcomes (the service looks every 0.5 s) up to
   `--guardrail-outcomes`, with the spec's defaults (`window` 500, `min_sample` 100,
   `confidence` 0.95): the share of A/A arms (healthy, at or below the limit) ever halted, and
   the outcomes until a breaking arm is halted, and until an arm that breaks after 1,000 or
   10,000 healthy outcomes is halted. `--guardrail-runs` runs per row (a tenth of them for the
   late regressions), seeded. Quality floors: a binary thumbs-up, a 1-5 rating, a skewed
   [0, 1] judge score and a mostly-zero 0-100 score.

5. With `--arm-share S` (only this table): A/A experiments whose arm takes share S of
   `--requests` requests, assigned at random request by request, checked every 20 requests:
   the mSPRT's false-positive rate on 1% and 2% error rates, log TTFT, 5% errors and cost.

Latencies are lognormal (the simulator's shape), tested on the log scale as the service does.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
from scipy.stats import binomtest, norm

from router.cli_types import seed_number
from router.experiments.guardrails import check_guardrail
from router.experiments.outcomes import ArmData, MetricSamples, analysis_value
from router.experiments.sequential import msprt_arrays

FloatArray = npt.NDArray[np.float64]
MIXTURE_SD = 0.2  # the spec's default
MIN_SAMPLE = 100  # the spec's default, per arm
TTFT_MEDIAN_MS = 350.0
ALPHAS = (0.01, 0.05, 0.10)
EFFECTS = (0.10, 0.20, 0.30)  # TTFT reduction of the treatment arm
LOG_SDS = (0.16, 0.47, 0.6)  # simulator fitted profiles (0.16), the service test (0.47), docs
CHUNK = 25  # runs per vectorised block (memory stays small)


@dataclass(frozen=True)
class Checks:
    """Cumulative count, mean and variance of both arms at each check, per run."""

    n: FloatArray  # (checks,)
    control: tuple[FloatArray, FloatArray]  # mean, variance: (runs, checks)
    arm: tuple[FloatArray, FloatArray]


def _moments(values: FloatArray, at: npt.NDArray[np.int64]) -> tuple[FloatArray, FloatArray]:
    n = (at + 1).astype(np.float64)
    total = np.cumsum(values, axis=1)[:, at]
    total_sq = np.cumsum(values * values, axis=1)[:, at]
    return total / n, (total_sq - total * total / n) / np.maximum(n - 1.0, 1.0)


def checks(control: FloatArray, arm: FloatArray, batch: int) -> Checks:
    at = np.arange(batch - 1, control.shape[1], batch)
    return Checks((at + 1).astype(np.float64), _moments(control, at), _moments(arm, at))


def msprt_first_rejection(c: Checks, alpha: float) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Per run: index of the first check where the mSPRT rejects (-1: never), estimate there."""
    out = msprt_arrays(c.n, c.control[0], c.control[1], c.n, c.arm[0], c.arm[1], alpha=alpha,
                       mixture_sd=MIXTURE_SD)
    log_lr = np.nan_to_num(out.log_lr, nan=-np.inf)
    reject = (log_lr >= math.log(1.0 / alpha)) & (c.n >= MIN_SAMPLE)
    first = np.where(reject.any(axis=1), reject.argmax(axis=1), -1)
    rows = np.arange(reject.shape[0])
    return first, np.where(first >= 0, out.estimate[rows, first], np.nan)


def z_rejections(c: Checks, alpha: float) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Naive two-sided z-test: ever rejected over the checks, and rejected at the last one."""
    d = c.arm[0] - c.control[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.abs(d) / np.sqrt(c.control[1] / c.n + c.arm[1] / c.n)
    reject = np.nan_to_num(z, nan=0.0) > norm.ppf(1 - alpha / 2)
    reject &= c.n >= MIN_SAMPLE
    return reject.any(axis=1), reject[:, -1]


Draw = Callable[[np.random.Generator, tuple[int, int]], FloatArray]

AA_METRICS: dict[str, Draw] = {
    "log TTFT (lognormal, sd 0.6)": lambda rng, shape: rng.normal(
        math.log(TTFT_MEDIAN_MS), 0.6, size=shape),
    "error (Bernoulli 5%)": lambda rng, shape: (rng.random(shape) < 0.05).astype(np.float64),
    "cost $ (lognormal, sd 1)": lambda rng, shape: rng.lognormal(-6.0, 1.0, size=shape),
}


def aa_table(runs: int, per_arm: int, batch: int, seed: int) -> list[str]:
    lines = [f"A/A: {runs} experiments per row, checked every {batch}/arm up to {per_arm}/arm "
             f"({per_arm // batch} looks), min_sample {MIN_SAMPLE}, mixture_sd {MIXTURE_SD}",
             f"{'metric':<30} {'alpha':>5} {'mSPRT FPR':>9} {'95% CI':>13} {'bound':>6} "
             f"{'ok':>3} {'z peeking':>9} {'z fixed':>7}"]
    for name, draw in AA_METRICS.items():
        rng = np.random.default_rng([seed, sum(map(ord, name))])
        blocks = [checks(draw(rng, (k, per_arm)), draw(rng, (k, per_arm)), batch)
                  for k in _chunks(runs)]
        for alpha in ALPHAS:
            msprt = sum(int((msprt_first_rejection(b, alpha)[0] >= 0).sum()) for b in blocks)
            peek = fixed = 0
            for b in blocks:
                ever, last = z_rejections(b, alpha)
                peek, fixed = peek + int(ever.sum()), fixed + int(last.sum())
            ci = binomtest(msprt, runs).proportion_ci(0.95)
            bound = alpha + 0.02
            lines.append(f"{name:<30} {alpha:>5.2f} {msprt / runs:>9.1%} "
                         f"[{ci.low:>5.1%},{ci.high:>5.1%}] {bound:>6.0%} "
                         f"{'yes' if msprt / runs <= bound else 'NO':>3} {peek / runs:>9.1%} "
                         f"{fixed / runs:>7.1%}")
    return lines


SPLIT_METRICS: dict[str, Draw] = {
    "error (Bernoulli 1%)": lambda rng, shape: (rng.random(shape) < 0.01).astype(np.float64),
    "error (Bernoulli 2%)": lambda rng, shape: (rng.random(shape) < 0.02).astype(np.float64),
    **AA_METRICS,
}


def _split_moments(values: FloatArray, mask: npt.NDArray[np.bool_],
                   at: npt.NDArray[np.int64]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Count, mean and variance of the values where `mask` holds, at each check `at`."""
    n = np.cumsum(mask, axis=1)[:, at].astype(np.float64)
    total = np.cumsum(values * mask, axis=1)[:, at]
    total_sq = np.cumsum(values * values * mask, axis=1)[:, at]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / n
        variance = np.maximum(total_sq - total * mean, 0.0) / np.maximum(n - 1.0, 1.0)
    return n, mean, variance


def split_aa_rejections(values: FloatArray, in_arm: npt.NDArray[np.bool_], every: int,
                        alpha: float) -> int:
    """Runs (rows) whose mSPRT ever rejects, checked every `every` requests, request i of a
    run going to the arm where `in_arm` holds and to control elsewhere."""
    at = np.arange(every - 1, values.shape[1], every)
    nc, mc, vc = _split_moments(values, ~in_arm, at)
    na, ma, va = _split_moments(values, in_arm, at)
    out = msprt_arrays(nc, mc, vc, na, ma, va, alpha=alpha, mixture_sd=MIXTURE_SD)
    ready = (np.minimum(nc, na) >= MIN_SAMPLE) & np.isfinite(out.log_lr)
    return int((ready & (out.log_lr >= math.log(1 / alpha))).any(axis=1).sum())


def split_aa_table(runs: int, requests: int, every: int, share: float, seed: int,
                   alpha: float = 0.05) -> list[str]:
    """A/A with the arm taking `share` of `requests` (each request assigned at random, as the
    service's hash does), checked every `every` requests: the mSPRT's false-positive rate."""
    lines = [f"A/A, arm share {share:.0%}: {runs} experiments per row, checked every {every} "
             f"requests up to {requests}, min_sample {MIN_SAMPLE} per arm, alpha {alpha}",
             f"{'metric':<30} {'mSPRT FPR':>9} {'95% CI':>13} {'bound':>6} {'ok':>3}"]
    for name, draw in SPLIT_METRICS.items():
        rng = np.random.default_rng([seed, 11, sum(map(ord, name))])
        rejected = sum(split_aa_rejections(draw(rng, (k, requests)),
                                           rng.random((k, requests)) < share, every, alpha)
                       for k in _chunks(runs))
        ci = binomtest(rejected, runs).proportion_ci(0.95)
        bound = alpha + 0.02
        lines.append(f"{name:<30} {rejected / runs:>9.1%} [{ci.low:>5.1%},{ci.high:>5.1%}] "
                     f"{bound:>6.0%} {'yes' if rejected / runs <= bound else 'NO':>3}")
    return lines


def _chunks(runs: int) -> list[int]:
    return [min(CHUNK, runs - start) for start in range(0, runs, CHUNK)]


def fixed_horizon_per_arm(effect: float, log_sd: float, alpha: float = 0.05,
                          power: float = 0.8) -> int:
    """Per-arm n of a two-sided two-sample z-test on log TTFT with the given power."""
    d = abs(math.log(1.0 - effect))
    z = float(norm.ppf(1 - alpha / 2) + norm.ppf(power))
    return math.ceil(2 * (z * log_sd / d) ** 2)


def detection_table(runs: int, batch: int, seed: int, alpha: float = 0.05) -> list[str]:
    lines = [f"Detection: {runs} runs per row, 50/50, mSPRT alpha {alpha}, checked every "
             f"{batch}/arm; requests = both arms together",
             f"{'TTFT cut':>8} {'log sd':>6} {'max req':>8} {'detected':>8} {'wrong sign':>10} "
             f"{'median':>7} {'p95':>7} {'max':>7} {'fixed 80%':>9}"]
    for effect in EFFECTS:
        for log_sd in LOG_SDS:
            fixed = 2 * fixed_horizon_per_arm(effect, log_sd)
            per_arm = max(2000, min(40_000, 8 * fixed // 2 // batch * batch))
            rng = np.random.default_rng([seed, int(effect * 100), int(log_sd * 100)])
            totals: list[int] = []
            wrong = 0
            for k in _chunks(runs):
                control = rng.normal(math.log(TTFT_MEDIAN_MS), log_sd, size=(k, per_arm))
                arm = rng.normal(math.log(TTFT_MEDIAN_MS * (1 - effect)), log_sd,
                                 size=(k, per_arm))
                c = checks(control, arm, batch)
                first, estimate = msprt_first_rejection(c, alpha)
                hit = first >= 0
                wrong += int((estimate[hit] > 0).sum())
                totals += [int(2 * c.n[i]) for i in first[hit]]
            found = np.asarray(totals) if totals else np.asarray([np.nan])
            lines.append(
                f"{effect:>8.0%} {log_sd:>6.2f} {2 * per_arm:>8} {len(totals) / runs:>8.1%} "
                f"{wrong:>10} {np.nanmedian(found):>7.0f} "
                f"{np.nanpercentile(found, 95, method='higher'):>7.0f} "
                f"{np.nanmax(found):>7.0f} {fixed:>9}")
    return lines


# ------------------------------------------------------------------------------- guardrails

GUARD_MAX_RATE, GUARD_MAX_MS, GUARD_LOG_SD = 0.05, 1000.0, 0.6
P95_Z = float(norm.ppf(0.95))


@dataclass(frozen=True)
class GuardrailCase:
    """One row: a guardrail and how the arm's values are drawn (all runs, all outcomes)."""

    label: str
    guardrail: dict[str, object]
    metric: str
    draw: Callable[[np.random.Generator, int], FloatArray]
    metrics: tuple[dict[str, object], ...] = ()  # feedback metrics the spec declares


def _error_case(rate: float) -> GuardrailCase:
    return GuardrailCase(f"error_rate {GUARD_MAX_RATE:g}, true {rate:.1%}",
                         {"kind": "error_rate", "max_rate": GUARD_MAX_RATE}, "error",
                         lambda rng, n: (rng.random(n) < rate).astype(np.float64))


def _p95_case(share_of_limit: float) -> GuardrailCase:
    median = share_of_limit * GUARD_MAX_MS / math.exp(P95_Z * GUARD_LOG_SD)
    return GuardrailCase(f"p95_ttft_ms, p95 at {share_of_limit:.0%} of max_ms",
                         {"kind": "p95_ttft_ms", "max_ms": GUARD_MAX_MS}, "ttft_ms",
                         lambda rng, n: rng.lognormal(math.log(median), GUARD_LOG_SD, n))


def _flat_cost_case(share_of_limit: float) -> GuardrailCase:
    """$0.01 an answer but for 2% cache hits at $0 (mean $0.0098), against a limit the mean
    is `share_of_limit` of: a nearly constant cost."""
    limit = 0.0098 / share_of_limit
    return GuardrailCase(f"cost $0.01, 2% hits at $0, mean {share_of_limit:.0%} of limit",
                         {"kind": "cost_per_request", "max_usd": limit}, "cost_usd",
                         lambda rng, n: np.where(rng.random(n) < 0.02, 0.0, 0.01))


RATING_LEVELS = np.asarray([1.0, 2.0, 3.0, 4.0, 5.0])


def _quality_case(label: str, floor: float, value_range: tuple[float, float],
                  draw: Callable[[np.random.Generator, int], FloatArray]) -> GuardrailCase:
    kind = "binary" if value_range == (0.0, 1.0) and label.startswith("thumbs") else "continuous"
    return GuardrailCase(label, {"kind": "quality_floor", "metric": "score", "floor": floor},
                         "score", draw,
                         ({"name": "score", "kind": kind, "range": list(value_range)},))


def _rating(weights: tuple[float, ...]) -> Callable[[np.random.Generator, int], FloatArray]:
    return lambda rng, n: rng.choice(RATING_LEVELS, n, p=weights)


RATING_AT = (0.35, 0.25, 0.20, 0.12, 0.08)  # mean 2.33
RATING_LOW = (0.45, 0.25, 0.15, 0.10, 0.05)  # mean 2.05
GUARD_QUALITY_AA = (
    _quality_case("thumbs_up floor 0.7, true 0.7", 0.7, (0.0, 1.0),
                  lambda rng, n: (rng.random(n) < 0.7).astype(np.float64)),
    _quality_case("rating 1-5 floor 2.33, true mean 2.33", 2.33, (1.0, 5.0),
                  _rating(RATING_AT)),
    _quality_case("judge Beta(.3,1.5) floor .14, mean .167", 0.14, (0.0, 1.0),
                  lambda rng, n: rng.beta(0.3, 1.5, n)),
    _quality_case("score 0-100, 90% zeros, floor = mean 6", 6.0, (0.0, 100.0),
                  lambda rng, n: np.where(rng.random(n) < 0.9, 0.0, rng.uniform(20, 100, n))),
)
GUARD_AA = (*(_error_case(r) for r in (0.03, 0.04, 0.045, 0.05)),
            *(_p95_case(s) for s in (0.8, 0.9, 1.0)),
            *(_flat_cost_case(s) for s in (0.98, 1.0)), *GUARD_QUALITY_AA)
GUARD_BREACH = (_error_case(0.08), _error_case(0.10), _p95_case(1.3), _flat_cost_case(1.05),
                _quality_case("rating 1-5 floor 2.33, true mean 2.05", 2.33, (1.0, 5.0),
                              _rating(RATING_LOW)),
                _quality_case("judge Beta(.3,2.7) floor .14, mean .10", 0.14, (0.0, 1.0),
                              lambda rng, n: rng.beta(0.3, 2.7, n)))
LATE_HEALTHY, LATE_RATES = (1000, 10_000), (0.10, 0.20, 0.40)


def first_halt(case: GuardrailCase, values: FloatArray, every: int) -> int | None:
    """The arm's outcome count at its first halt, looking every `every` outcomes (None: never)."""
    from tests.experiments.support import make_spec

    spec = make_spec(guardrails=[case.guardrail], metrics=list(case.metrics))
    guardrail = spec.guardrails[0]
    scaled = np.asarray([analysis_value(case.metric, float(v)) for v in values])
    total, total_sq = np.cumsum(scaled), np.cumsum(scaled * scaled)
    for t in range(every, values.size + 1, every):
        samples = MetricSamples(count=t, total=float(total[t - 1]),
                                total_sq=float(total_sq[t - 1]),
                                recent=tuple(values[max(0, t - guardrail.window):t].tolist()))
        arm = ArmData(arm="cheap", metrics={case.metric: samples})
        if check_guardrail(spec, guardrail, arm, datetime.now(UTC)) is not None:
            return t
    return None


def guardrail_table(runs: int, outcomes: int, every: int, seed: int) -> list[str]:
    early = min(2000, outcomes)
    lines = [f"Guardrails: {runs} seeded runs per row, production check_guardrail every "
             f"{every} outcomes up to {outcomes}, spec defaults (window 500, min_sample 100, "
             f"confidence 0.95); p95 rows lognormal log-sd {GUARD_LOG_SD}",
             f"{'A/A (healthy arm)':<42} {f'halted by {early}':>16} {f'by {outcomes}':>9} "
             f"{'95% CI':>13}"]
    for i, case in enumerate(GUARD_AA):
        rng = np.random.default_rng([seed, 7, i])
        halts = [first_halt(case, case.draw(rng, outcomes), every) for _ in range(runs)]
        by_end = sum(h is not None for h in halts)
        ci = binomtest(by_end, runs).proportion_ci(0.95)
        lines.append(f"{case.label:<42} "
                     f"{sum(h is not None and h <= early for h in halts) / runs:>16.1%} "
                     f"{by_end / runs:>9.1%} [{ci.low:>5.1%},{ci.high:>5.1%}]")
    lines.append(f"{'breach (outcomes until halt)':<42} {'halted':>8} {'median':>7} "
                 f"{'p95':>7} {'max':>7}")
    for i, case in enumerate(GUARD_BREACH):
        rng = np.random.default_rng([seed, 8, i])
        halts = [first_halt(case, case.draw(rng, outcomes), every) for _ in range(runs)]
        found = np.asarray([float(h) for h in halts if h is not None] or [math.nan])
        lines.append(f"{case.label:<42} {sum(h is not None for h in halts) / runs:>8.1%} "
                     f"{np.nanmedian(found):>7.0f} "
                     f"{np.nanpercentile(found, 95, method='higher'):>7.0f} "
                     f"{np.nanmax(found):>7.0f}")
    lines.append(f"{'late regression (2% errors, then)':<42} {'healthy':>8} {'median':>7} "
                 f"{'max':>7}  (outcomes from the change to the halt, looked every 10)")
    for healthy in LATE_HEALTHY:
        for rate in LATE_RATES:
            rng = np.random.default_rng([seed, 9, healthy, int(rate * 100)])
            case = _error_case(rate)
            delays = []
            for _ in range(max(1, runs // 10)):
                values = np.concatenate([rng.random(healthy) < 0.02,
                                         rng.random(3000) < rate]).astype(np.float64)
                halt = first_halt(case, values, 10)
                delays.append(math.nan if halt is None else float(halt - healthy))
            found = np.asarray(delays)
            lines.append(f"{f'{rate:.0%} errors':<42} {healthy:>8} "
                         f"{np.nanmedian(found):>7.0f} {np.nanmax(found):>7.0f}"
                         + (f"  ({int(np.isnan(found).sum())} not halted)"
                            if np.isnan(found).any() else ""))
    return lines


# --------------------------------------------------------------------------------- service

SERVICE_BASE_MS, SERVICE_SPREAD, SERVICE_BATCH, SERVICE_MAX = 120.0, 3.0, 40, 1200
SERVICE_TASKS = ("chat", "autocomplete", "extraction", "classification", "summarization",
                 "translation", "code", "math", "reasoning_analysis", "creative_writing")


def _service_yaml(sim_base: str, replications: int) -> str:
    from tests.experiments_service.support import router_yaml

    experiments = "".join(
        f"""  - name: rep-{i}
    tasks: [{task}]
    unit: request
    salt: bench-{i}
    arms:
      - {{name: control, route: "policy:default", control: true, share: 0.5}}
      - {{name: fast, route: "model:fast", share: 0.5}}
""" for i, task in enumerate(SERVICE_TASKS[:replications]))
    return router_yaml(sim_base, ["base", "fast"], ["base"], {}, experiments)


async def _replicate(base_url: str, index: int, task: str, concurrency: int) -> str:
    from functools import partial

    from tests.experiments_service.support import client, gather_limited, report, send

    sent = 0
    async with client(base_url) as http:
        while sent < SERVICE_MAX:
            calls = [partial(send, http, task, f"rep{index}-{i}")
                     for i in range(sent, sent + SERVICE_BATCH)]
            seen = await gather_limited(calls, concurrency)
            sent += len(seen)
            await asyncio.sleep(0.2)  # outcome records are written just after each response
            rep = await report(http, f"rep-{index}")
            primary = next(r for r in rep["sequential"] if r["metric"] == "ttft_ms")
            if primary["reject"]:
                p50 = next(c for c in rep["comparisons"]
                           if (c["metric"], c["statistic"]) == ("ttft_ms", "p50"))
                return (f"rep-{index:<2} {sent:>8} {math.exp(primary['estimate']):>6.3f} "
                        f"[{math.exp(primary['low']):.3f}, {math.exp(primary['high']):.3f}] "
                        f"{p50['difference']:>+8.1f} ms  "
                        f"{'yes' if p50['excludes_zero'] else 'no':>3}")
    return f"rep-{index:<2} not detected within {SERVICE_MAX} requests"


def service_table(replications: int, concurrency: int) -> list[str]:
    """Independent replications of the acceptance test's experiment at the real service."""
    import tempfile
    from pathlib import Path

    from tests.experiments_service.support import TENANT_ENV, profile
    from tests.support.services import start_router, start_simulator

    directory = Path(tempfile.mkdtemp(prefix="experiments_sim-"))
    models = {"base": profile(SERVICE_BASE_MS, ttft_spread=SERVICE_SPREAD),
              "fast": profile(SERVICE_BASE_MS * 0.8, ttft_spread=SERVICE_SPREAD)}
    sim = start_simulator(directory, models)
    try:
        router = start_router(directory, _service_yaml(sim.base_url, replications),
                              env=TENANT_ENV)
        try:
            rows = [asyncio.run(_replicate(router.base_url, i, task, concurrency))
                    for i, task in enumerate(SERVICE_TASKS[:replications])]
        finally:
            router.stop()
    finally:
        sim.stop()
    return [f"Service: {replications} independent experiments (one per task) in one router, "
            f"TTFT median {SERVICE_BASE_MS:g} vs {SERVICE_BASE_MS * 0.8:g} ms, p99 x"
            f"{SERVICE_SPREAD:g}, unit request 50/50, report read every {SERVICE_BATCH} "
            f"requests, {concurrency} in flight",
            f"{'run':<6} {'requests':>8} {'ratio':>6} {'conf. sequence':<16} {'p50 diff':>11} "
            f"{'CI<0':>4}", *rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="A/A experiments per row")
    parser.add_argument("--per-arm", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=10, help="values per arm between looks")
    parser.add_argument("--detection-runs", type=int, default=200)
    parser.add_argument("--seed", type=seed_number, default=1)
    parser.add_argument("--service-replications", type=int, default=0,
                        help="also run this many (<= 10) detections at a real router")
    parser.add_argument("--service-concurrency", type=int, default=8)
    parser.add_argument("--arm-share", type=float, default=None,
                        help="only an A/A table with the arm taking this share of requests")
    parser.add_argument("--requests", type=int, default=10_000,
                        help="requests per --arm-share experiment, checked every 20")
    parser.add_argument("--guardrails", action="store_true",
                        help="only the guardrail table (false halts and detection)")
    parser.add_argument("--guardrail-runs", type=int, default=200)
    parser.add_argument("--guardrail-outcomes", type=int, default=10_000)
    parser.add_argument("--guardrail-every", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}, {os.cpu_count()} cpus")
    if args.arm_share is not None:
        started = time.perf_counter()
        print("\n".join(split_aa_table(args.runs, args.requests, 20, args.arm_share,
                                       args.seed)))
        print(f"({time.perf_counter() - started:.1f} s)")
        return 0
    if args.guardrails:
        started = time.perf_counter()
        print("\n".join(guardrail_table(args.guardrail_runs, args.guardrail_outcomes,
                                         args.guardrail_every, args.seed)))
        print(f"({time.perf_counter() - started:.1f} s)")
        return 0
    started = time.perf_counter()
    print("\n".join(aa_table(args.runs, args.per_arm, args.batch, args.seed)))
    print(f"({time.perf_counter() - started:.1f} s)\n")
    started = time.perf_counter()
    print("\n".join(detection_table(args.detection_runs, args.batch, args.seed)))
    print(f"({time.perf_counter() - started:.1f} s)")
    if args.service_replications > 0:
        started = time.perf_counter()
        print()
        print("\n".join(service_table(min(args.service_replications, len(SERVICE_TASKS)),
                                      args.service_concurrency)))
        print(f"({time.perf_counter() - started:.1f} s; load average "
              f"{os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
