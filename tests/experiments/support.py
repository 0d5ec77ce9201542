"""Shared helpers of the experiment tests: a spec factory and vectorised simulations.

Latencies are lognormal, like the provider simulator's: a median and a log-scale sd. The
sequential test is evaluated with the production `msprt_arrays` over every (run, check) pair
at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from policies.experiments.schema import ExperimentSpec
from router.experiments.sequential import msprt_arrays

FloatArray = npt.NDArray[np.float64]
TTFT_MEDIAN_MS = 350.0
TTFT_LOG_SD = 0.6


def make_spec(**overrides: Any) -> ExperimentSpec:
    """A valid two-arm spec (50/50, unit user) with `overrides` applied to its fields."""
    fields: dict[str, Any] = {
        "name": "chat-cheaper",
        "tasks": ["chat"],
        "salt": "2025-01",
        "arms": [
            {"name": "control", "route": "policy:chat", "control": True, "share": 0.5},
            {"name": "cheap", "route": "model:small", "share": 0.5},
        ],
        "metrics": [{"name": "thumbs_up", "kind": "binary"}],
    }
    fields.update(overrides)
    return ExperimentSpec.model_validate(fields)


def cumulative_moments(values: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Count, mean and unbiased variance after each column, per row."""
    n = np.arange(1, values.shape[1] + 1, dtype=np.float64)
    total = np.cumsum(values, axis=1)
    total_sq = np.cumsum(values * values, axis=1)
    variance = (total_sq - total * total / n) / np.maximum(n - 1.0, 1.0)
    return n, total / n, variance


@dataclass(frozen=True)
class Monitoring:
    """Per run: whether the test ever rejected, at which per-arm count, with which estimate."""

    rejected: npt.NDArray[np.bool_]
    per_arm_at_rejection: npt.NDArray[np.int64]
    estimate_at_rejection: FloatArray


def monitor(
    control: FloatArray, arm: FloatArray, *, batch: int, alpha: float, mixture_sd: float,
    min_sample: int,
) -> Monitoring:
    """Run the mSPRT after every `batch` values per arm, for every row (run) at once."""
    nc, mc, vc = cumulative_moments(control)
    na, ma, va = cumulative_moments(arm)
    checks = np.arange(batch - 1, control.shape[1], batch)
    out = msprt_arrays(nc[checks], mc[:, checks], vc[:, checks], na[checks], ma[:, checks],
                       va[:, checks], alpha=alpha, mixture_sd=mixture_sd)
    log_lr = np.nan_to_num(out.log_lr, nan=-np.inf)
    reject = (log_lr >= np.log(1.0 / alpha)) & (checks + 1 >= min_sample)
    rejected = reject.any(axis=1)
    first = reject.argmax(axis=1)
    rows = np.arange(control.shape[0])
    return Monitoring(
        rejected=rejected,
        per_arm_at_rejection=np.where(rejected, checks[first] + 1, -1),
        estimate_at_rejection=np.where(rejected, out.estimate[rows, first], np.nan),
    )


def log_latencies(rng: np.random.Generator, shape: tuple[int, int], median_ms: float) -> FloatArray:
    """Log of lognormal latencies with the simulator's spread."""
    return rng.normal(np.log(median_ms), TTFT_LOG_SD, size=shape)
