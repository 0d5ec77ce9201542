"""The pure statistics: mSPRT and its confidence sequence, bootstrap, guardrail checks."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from router.experiments.bootstrap import bootstrap_difference
from router.experiments.guardrails import check_guardrail, evaluate_guardrails, wilson_bounds
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


def test_wilson_bounds_bracket_the_observed_share() -> None:
    """The lower bound sits below and the upper bound above the observed share."""
    low, high = wilson_bounds(10, 100, 0.95)
    assert 0.0 < low < 0.1 < high < 1.0


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
