"""Acceptance simulations: detection of a faster arm, A/A false positives, halting.

Latencies are lognormal like the provider simulator's (median 350 ms, log sd 0.6); every
simulation is seeded and the many-run ones are vectorised over runs with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from router.experiments.bootstrap import bootstrap_difference
from tests.experiments.support import TTFT_MEDIAN_MS, log_latencies, monitor

ALPHA = 0.05
MIXTURE_SD = 0.2
MIN_SAMPLE = 100
BATCH_PER_ARM = 10
DETECTION_REQUESTS = 700  # both arms together; measured 95th percentile: 640 (docs)
FASTER = 0.8


def _faster_arm_runs(runs: int, per_arm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    control = log_latencies(rng, (runs, per_arm), TTFT_MEDIAN_MS)
    arm = log_latencies(rng, (runs, per_arm), TTFT_MEDIAN_MS * FASTER)
    return control, arm


def test_twenty_percent_lower_ttft_is_detected_with_the_right_sign_within_700_requests() -> None:
    """In >= 95% of 200 runs the mSPRT rejects, arm faster, before 700 requests in total."""
    control, arm = _faster_arm_runs(200, 1500, seed=20250601)
    found = monitor(control, arm, batch=BATCH_PER_ARM, alpha=ALPHA, mixture_sd=MIXTURE_SD,
                    min_sample=MIN_SAMPLE)
    total = 2 * found.per_arm_at_rejection
    assert found.rejected.all()
    assert (found.estimate_at_rejection < 0).all()
    assert np.mean(total <= DETECTION_REQUESTS) >= 0.95


def test_bootstrap_p50_interval_excludes_zero_at_the_stated_sample() -> None:
    """At 700 requests the bootstrap interval of the p50 difference is below 0 in >= 95% of runs."""
    control, arm = _faster_arm_runs(200, DETECTION_REQUESTS // 2, seed=20250602)
    rng = np.random.default_rng(3)
    intervals = [bootstrap_difference(np.exp(c), np.exp(a), "p50", rng, resamples=500)
                 for c, a in zip(control, arm, strict=True)]
    assert np.mean([i is not None and i.high < 0 for i in intervals]) >= 0.95


def _aa_values(kind: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if kind == "log_ttft":
        return log_latencies(rng, shape, TTFT_MEDIAN_MS)
    if kind == "error":
        return (rng.random(shape) < 0.05).astype(np.float64)
    return rng.lognormal(-6.0, 1.0, size=shape)  # cost in dollars, heavy right tail


@pytest.mark.parametrize("kind", ["log_ttft", "error", "cost"])
def test_aa_false_positive_rate_under_continuous_monitoring_stays_within_alpha(kind: str) -> None:
    """100 A/A experiments checked after every batch up to 5000/arm: FPR <= alpha + 2 points."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    control = _aa_values(kind, rng, (100, 5000))
    arm = _aa_values(kind, rng, (100, 5000))
    found = monitor(control, arm, batch=BATCH_PER_ARM, alpha=ALPHA, mixture_sd=MIXTURE_SD,
                    min_sample=MIN_SAMPLE)
    assert found.rejected.mean() <= ALPHA + 0.02
