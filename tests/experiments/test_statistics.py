"""The pure statistics: mSPRT and its confidence sequence, bootstrap, guardrail checks."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy import integrate, stats

from bench.experiments_sim import split_aa_rejections
from policies.experiments.schema import ExperimentSpec
from router.experiments.anytime import (
    BETA_PRIOR_VALUES,
    bernoulli_log_e,
    nonnegative_mean_log_e,
)
from router.experiments.bootstrap import bootstrap_difference
from router.experiments.guardrails import (
    check_guardrail,
    evaluate_guardrails,
    restart_every,
    segments_under_test,
)
from router.experiments.outcomes import ArmData, ExperimentData, MetricSamples
from router.experiments.sequential import msprt
from tests.experiments.support import make_spec

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def _samples(values: np.ndarray) -> MetricSamples:
    v = np.asarray(values, dtype=np.float64)
    return MetricSamples(count=v.size, total=float(v.sum()), total_sq=float((v * v).sum()),
                         reservoir=tuple(v.tolist()), recent=tuple(v.tolist()))


@given(st.floats(-1.0, 1.0), st.integers(10, 5000), st.floats(0.1, 3.0))
def test_msprt_rejects_exactly_when_its_confidence_sequence_excludes_zero(
    shift: float, n: int, sd: float
) -> None:
    """p <= alpha if and only if 0 lies outside the always-valid interval."""
    control = MetricSamples(count=n, total=0.0, total_sq=sd * sd * (n - 1))
    arm = MetricSamples(count=n, total=shift * n, total_sq=sd * sd * (n - 1) + shift * shift * n)
    result = msprt(control, arm, arm_name="b", metric="x", alpha=0.05, mixture_sd=0.2,
                   min_sample=2)
    assert math.isclose(result.estimate, shift, abs_tol=1e-9)
    if not math.isclose(min(abs(result.low), abs(result.high)), 0.0, abs_tol=1e-9):
        assert result.reject == (result.low > 0 or result.high < 0)


def test_msprt_waits_for_min_sample_and_keeps_the_smallest_p_value() -> None:
    """Below min_sample nothing is decided; a past small p-value is carried forward."""
    rng = np.random.default_rng(0)
    control, arm = _samples(rng.normal(0, 1, 50)), _samples(rng.normal(1, 1, 50))
    early = msprt(control, arm, arm_name="b", metric="x", alpha=0.05, mixture_sd=0.2,
                  min_sample=100)
    assert (early.ready, early.reject, early.p_value) == (False, False, 1.0)
    same = _samples(rng.normal(0, 1, 200))
    later = msprt(same, same, arm_name="b", metric="x", alpha=0.05, mixture_sd=0.2,
                  min_sample=100, previous_p=0.01)
    assert later.p_value == 0.01 and later.reject


def test_msprt_holds_alpha_when_one_arm_is_small_and_has_seen_no_error_yet() -> None:
    """A/A, 1% errors, the arm a fifth of the traffic, looked at every 20 requests up to
    10,000 from 100 each on: with each arm's own variance the arm's 0 (no error yet) read as
    certain and 12% of runs rejected at alpha 5%; the pooled variance holds the bound."""
    rng = np.random.default_rng(21)
    errors = (rng.random((400, 10_000)) < 0.01).astype(np.float64)
    rejected = split_aa_rejections(errors, rng.random((400, 10_000)) < 0.2, 20, 0.05)
    assert rejected / 400 <= 0.05 + 0.02, rejected


def test_constant_metrics_carry_no_evidence() -> None:
    """With zero variance on both sides (e.g. no errors anywhere) the test stays silent."""
    zeros = _samples(np.zeros(500))
    result = msprt(zeros, zeros, arm_name="b", metric="error", alpha=0.05, mixture_sd=0.2,
                   min_sample=100)
    assert not result.ready and result.p_value == 1.0


def test_bootstrap_is_reproducible_and_brackets_a_clear_shift() -> None:
    """Same seed, same interval; a shift of 1 sd on 500 values is bracketed away from 0."""
    rng = np.random.default_rng(1)
    control, arm = rng.normal(10, 1, 500), rng.normal(11, 1, 500)
    first = bootstrap_difference(control, arm, "mean", np.random.default_rng(7))
    again = bootstrap_difference(control, arm, "mean", np.random.default_rng(7))
    assert first == again and first is not None
    assert 0 < first.low < first.difference < first.high
    assert bootstrap_difference([], arm, "p95", rng) is None


def test_bootstrap_gives_no_interval_on_a_handful_of_values() -> None:
    """One thumbs-up a side gave the interval [+1, +1], flagged as significant; two against
    four costs the same. Below ten values a side there is no interval, at ten there is one."""
    rng = np.random.default_rng(3)
    assert bootstrap_difference([0.0], [1.0], "mean", rng) is None
    assert bootstrap_difference([1.0, 2.0], [3.0, 4.0, 5.0, 6.0], "mean", rng) is None
    assert bootstrap_difference(np.zeros(9), np.ones(10), "mean", rng) is None
    interval = bootstrap_difference(np.zeros(10), np.ones(10), "mean", rng)
    assert interval is not None and interval.difference == 1.0


def test_a_p95_comparison_waits_for_forty_values_a_side() -> None:
    """The p95 of ten values is nearly their largest: A/A comparisons of ten lognormal values
    a side excluded 0 in 11-14% of runs at 95%. A p95 interval needs 40 a side; a p50 still 10."""
    rng = np.random.default_rng(4)
    ten, thirty_nine, forty = (rng.lognormal(0, 1, n) for n in (10, 39, 40))
    assert bootstrap_difference(ten, ten, "p95", rng) is None
    assert bootstrap_difference(forty, thirty_nine, "p95", rng) is None
    assert bootstrap_difference(forty, forty, "p95", rng) is not None
    assert bootstrap_difference(ten, ten, "p50", rng) is not None


def test_bernoulli_mixture_equals_its_integral() -> None:
    """The closed form is the likelihood ratio mixed over the truncated Beta prior."""
    p0 = 0.05
    a, b = BETA_PRIOR_VALUES * p0, BETA_PRIOR_VALUES * (1 - p0)
    for hits, n in [(0, 10), (5, 50), (30, 300), (200, 1000)]:
        def ratio(p: float, hits: int = hits, n: int = n) -> float:
            return float((p / p0) ** hits * ((1 - p) / (1 - p0)) ** (n - hits)
                         * stats.beta.pdf(p, a, b))
        mixed = integrate.quad(ratio, p0, 1, points=[hits / n], limit=200)[0]
        expected = math.log(mixed / stats.beta.sf(p0, a, b))
        assert math.isclose(float(bernoulli_log_e(hits, n, p0)), expected, rel_tol=1e-6,
                            abs_tol=1e-9)


def _ever_crossed(log_e: np.ndarray, alpha: float) -> float:
    """Share of runs (rows) whose e-process ever reached 1/alpha."""
    return float((log_e >= math.log(1 / alpha)).any(axis=1).mean())


def test_bernoulli_e_process_rarely_crosses_under_the_null_however_long_it_is_watched() -> None:
    """Looked at after every value for 4,000 values, at the null's edge (share = p0) and
    inside it: the share of runs ever crossing 1/alpha stays below alpha (Ville)."""
    rng = np.random.default_rng(11)
    n = np.arange(1, 4001)
    for share, p0 in [(0.05, 0.05), (0.04, 0.05), (0.3, 0.3)]:
        hits = np.cumsum(rng.random((400, n.size)) < share, axis=1)
        assert _ever_crossed(bernoulli_log_e(hits, n, p0), 0.05) <= 0.05 + 0.03
    breach = np.cumsum(rng.random((400, n.size)) < 0.10, axis=1)
    assert _ever_crossed(bernoulli_log_e(breach, n, 0.05), 0.05) > 0.9


def test_nonnegative_mean_e_process_rarely_crosses_under_the_null_however_long_it_is_watched(
) -> None:
    """Values >= 0 with mean exactly m0 (skewed in [0, 1], mostly zero, tightly spread, a
    heavy-tailed cost, a nearly constant one), looked at after every value for 3,000 values from
    the first: few runs cross 1/alpha (no plug-in variance: the normal mixture it replaced
    crossed in 10% of the nearly constant cost's runs with the whole arm's test alone); a
    breach of the mean, even a small one of tightly spread values, is seen in nearly every run."""
    rng = np.random.default_rng(16)
    n = np.arange(1, 3001, dtype=np.float64)

    def crossed(values: np.ndarray, m0: float) -> float:
        total, total_sq = np.cumsum(values, axis=1), np.cumsum(values * values, axis=1)
        return _ever_crossed(nonnegative_mean_log_e(n, total, total_sq, m0), 0.05)

    shape = (300, n.size)
    nulls = [(rng.beta(1.5, 0.3, shape), 1.5 / 1.8),
             (np.where(rng.random(shape) < 0.9, 0.0, rng.uniform(0.2, 1.0, shape)), 0.06),
             (rng.uniform(0.3, 0.36, shape), 0.33),
             (rng.lognormal(-6.0, 1.0, shape), math.exp(-6.0 + 0.5)),
             (np.where(rng.random(shape) < 0.02, 0.0, 0.01), 0.0098)]
    for values, m0 in nulls:
        assert crossed(values, m0) <= 0.05 + 0.03
    assert crossed(rng.uniform(0.32, 0.38, shape), 0.33) > 0.9
    assert crossed(rng.beta(2.7, 0.3, shape), 1.5 / 1.8) > 0.9  # mean 0.9
    assert crossed(rng.lognormal(-6.0, 1.0, shape) * 1.5, math.exp(-6.0 + 0.5)) > 0.9


def test_the_segments_under_test_spend_at_most_alpha_over_an_arms_life() -> None:
    """Every test ever started (the all-values one and one per `restart_every` values) has
    its own level, and the levels add up to at most alpha; a recent test reads only values
    within the window."""
    alpha, window = 0.05, 500
    step = restart_every(window)
    spent = {0: 0.0}
    for count in range(1, 50_001, 7):
        segs = segments_under_test(count, min(count, window), window, alpha, whole_known=True)
        assert segs.whole[0] and segs.sizes[0] == count
        assert (segs.sizes[1:] <= window).all() and (segs.sizes[1:] >= 1).all()
        for size, log_threshold in zip(segs.sizes[1:], segs.log_thresholds[1:], strict=True):
            spent[int(count - size) // step] = math.exp(-float(log_threshold))
        spent[0] = math.exp(-float(segs.log_thresholds[0]))
    assert sum(spent.values()) <= alpha
    latency = segments_under_test(5000, 500, window, alpha, whole_known=False)
    assert not latency.whole.any() and (latency.sizes <= 500).all()


def _first_halt(spec_guardrail: dict[str, object], metric: str, values: np.ndarray,
                every: int, spec: ExperimentSpec | None = None) -> int | None:
    """The arm's count at its first halt, with the store's snapshot at every `every` values."""
    spec = spec if spec is not None else make_spec(guardrails=[spec_guardrail])
    guardrail = spec.guardrails[0]
    total, total_sq = np.cumsum(values), np.cumsum(values * values)
    for t in range(every, values.size + 1, every):
        samples = MetricSamples(count=t, total=float(total[t - 1]),
                                total_sq=float(total_sq[t - 1]),
                                recent=tuple(values[max(0, t - guardrail.window):t].tolist()))
        arm = ArmData(arm="cheap", metrics={metric: samples})
        if check_guardrail(spec, guardrail, arm, NOW) is not None:
            return t
    return None


def test_an_arm_at_its_error_limit_is_rarely_halted_over_a_long_life() -> None:
    """A/A at exactly `max_rate` (5% errors), the defaults (window 500, confidence 0.95),
    looked at every 20 outcomes up to 3,000: at most a few runs in 100 are halted (with a
    95% per-look bound over a sliding window about two thirds were)."""
    rng = np.random.default_rng(13)
    halts = [_first_halt({"kind": "error_rate", "max_rate": 0.05}, "error",
                         (rng.random(3000) < 0.05).astype(np.float64), 20)
             for _ in range(100)]
    halted = sum(h is not None for h in halts)
    assert halted <= 12, halts


def test_a_healthy_arm_of_a_skewed_quality_score_is_rarely_halted() -> None:
    """A [0, 1] judge score ~ Beta(0.3, 1.5) (mean 0.167, most answers near 0) against a floor
    of 0.14, the defaults, looked at every 20 values up to 2,000: the normal mixture with a
    plug-in variance over recent tests of a few values halted 13% of such healthy arms."""
    rng = np.random.default_rng(17)
    guardrail = {"kind": "quality_floor", "metric": "judge", "floor": 0.14}
    spec = make_spec(metrics=[{"name": "judge", "kind": "continuous", "range": [0, 1]}],
                     guardrails=[guardrail])
    halts = [_first_halt(guardrail, "judge", rng.beta(0.3, 1.5, 2000), 20, spec)
             for _ in range(100)]
    assert sum(h is not None for h in halts) <= 4, halts
    breached = [_first_halt(guardrail, "judge", rng.beta(0.3, 2.7, 2000), 20, spec)
                for _ in range(20)]  # mean 0.1
    assert all(h is not None for h in breached), breached


def test_a_floor_at_the_top_of_its_range_holds_an_arm_always_at_the_top() -> None:
    """Every value at the top of the range meets a floor set there. The shortfall the arm's
    sums give is 1e-12 or so by rounding, read as infinite evidence against a null of no
    shortfall at all (the re-audit of 2026-12-07)."""
    assert nonnegative_mean_log_e(600, 6.3e-12, 0.0, 0.0) == 0.0
    assert nonnegative_mean_log_e(600, 0.01, 0.0, 0.0) == math.inf
    for top in (0.1, 0.7, 4.7):
        spec = make_spec(metrics=[{"name": "score", "kind": "continuous", "range": [0, top]}],
                         guardrails=[{"kind": "quality_floor", "metric": "score", "floor": top}])
        assert _first_halt({}, "score", np.full(1200, top), 20, spec) is None
        assert _first_halt({}, "score", np.full(1200, top * 0.99), 20, spec) is not None


def test_a_healthy_arm_of_a_nearly_constant_cost_is_rarely_halted() -> None:
    """Every answer costs $0.01 but for 2% cache hits at $0: the mean, $0.0098, is the limit.
    The normal mixture with a plug-in variance read a recent test's values with no hit as
    certain, and halted 65% of such arms."""
    rng = np.random.default_rng(18)
    guardrail = {"kind": "cost_per_request", "max_usd": 0.0098}
    halts = [_first_halt(guardrail, "cost_usd",
                         np.where(rng.random(2000) < 0.02, 0.0, 0.01), 20) for _ in range(60)]
    assert sum(h is not None for h in halts) <= 3, halts
    costly = [_first_halt(guardrail, "cost_usd",
                          np.where(rng.random(2000) < 0.02, 0.0, 0.0105), 20) for _ in range(10)]
    assert all(h is not None for h in costly), costly


def test_a_late_sudden_regression_is_judged_on_its_own_values() -> None:
    """After 5,000 healthy outcomes (2% errors) the error rate jumps to 40%: a recent test
    started after the jump halts the arm within one window, although the arm's overall rate
    is still far below the limit."""
    rng = np.random.default_rng(14)
    values = np.concatenate([rng.random(5000) < 0.02, rng.random(1000) < 0.4]).astype(float)
    halt = _first_halt({"kind": "error_rate", "max_rate": 0.05, "window": 200,
                        "min_sample": 50}, "error", values, 10)
    assert halt is not None and 5000 < halt <= 5200


def test_quality_floor_fires_on_a_sure_breach_binary_and_continuous() -> None:
    """Thumbs-up at 40% against a floor of 0.7, ratings of 2 against a floor of 3: halted
    with the observed mean; at the floor's level they are not."""
    spec = make_spec(
        metrics=[{"name": "thumbs_up", "kind": "binary"},
                 {"name": "rating", "kind": "continuous", "range": [1, 5]}],
        guardrails=[{"kind": "quality_floor", "metric": "thumbs_up", "floor": 0.7,
                     "min_sample": 50, "window": 200},
                    {"kind": "quality_floor", "metric": "rating", "floor": 3.0,
                     "min_sample": 50, "window": 200}])
    rng = np.random.default_rng(15)
    bad = _arm(thumbs_up=(rng.random(200) < 0.4).astype(float),
               rating=np.clip(rng.normal(2.0, 1.0, 200), 1, 5))
    thumbs = check_guardrail(spec, spec.guardrails[0], bad, NOW)
    rating = check_guardrail(spec, spec.guardrails[1], bad, NOW)
    assert thumbs is not None and thumbs.observed < 0.7 and "always-valid" in thumbs.reason
    assert rating is not None and rating.observed < 3.0
    good = _arm(thumbs_up=(rng.random(200) < 0.9).astype(float),
                rating=np.clip(rng.normal(4.0, 1.0, 200), 1, 5))
    assert check_guardrail(spec, spec.guardrails[0], good, NOW) is None
    assert check_guardrail(spec, spec.guardrails[1], good, NOW) is None


def _arm(**metrics: np.ndarray) -> ArmData:
    return ArmData(arm="cheap", metrics={name: _samples(v) for name, v in metrics.items()})


def test_p95_latency_and_cost_guardrails_fire_only_on_a_sure_breach() -> None:
    """A slow, expensive arm is halted; the same arm below min_sample is not."""
    spec = make_spec(guardrails=[
        {"kind": "p95_ttft_ms", "max_ms": 1000, "min_sample": 100, "window": 300},
        {"kind": "cost_per_request", "max_usd": 0.01, "min_sample": 100, "window": 300},
    ])
    rng = np.random.default_rng(2)
    slow = _arm(ttft_ms=rng.lognormal(np.log(800), 0.5, 300), cost_usd=np.full(300, 0.02))
    halt = check_guardrail(spec, spec.guardrails[0], slow, NOW)
    assert halt is not None and halt.observed > 1000 and halt.at_sample == 300
    cost_halt = check_guardrail(spec, spec.guardrails[1], slow, NOW)
    assert cost_halt is not None and cost_halt.guardrail == "cost_per_request"
    young = _arm(ttft_ms=rng.lognormal(np.log(800), 0.5, 99))
    assert check_guardrail(spec, spec.guardrails[0], young, NOW) is None


def test_control_and_healthy_arms_are_never_halted() -> None:
    """Only treatment arms are checked, and a healthy one passes every guardrail."""
    spec = make_spec(guardrails=[{"kind": "error_rate", "max_rate": 0.05, "min_sample": 50,
                                  "window": 200}])
    rng = np.random.default_rng(3)
    broken = ArmData(arm="control", metrics={"error": _samples(np.ones(200))})
    healthy = ArmData(arm="cheap", metrics={"error": _samples(rng.random(200) < 0.02)})
    data = ExperimentData(experiment=spec.name, arms={"control": broken, "cheap": healthy})
    assert evaluate_guardrails(spec, data, NOW) == ()
