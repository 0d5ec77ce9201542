"""N-model replay per benchmark: per-task floor baseline, per-request router, oracle side by side.

Follows `evals/datasets/routing_multi/README.md` ("Testing cheapest model above a quality
floor"): candidates are the priced models present on every row; per fold the floor is `fraction`
x the reference's training quality (the `--relative-to` model, else the best candidate on the
training folds); the per-task baseline is the cheapest candidate whose Wilson 95% lower bound
clears it (else the reference); the router is `evals.floor`; the oracle sends each prompt to the
cheapest candidate with the top score on it. Floors are checked on held-out folds against the
reference model's held-out quality; the always-reference strategy is named `always-best` when
the reference is the best model, `always-reference` when it was given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from evals.floor import FloorReport, FloorSpec, floor_replay
from evals.metrics import cost_saving, floor_hold_rate, wilson_interval
from evals.outcomes import OutcomeTable
from evals.routers import FitConfig
from policies.intervals import relative_floor_margin

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class StrategyResult:
    """Held-out quality and cost of one strategy (USD per 1,000 prompts)."""

    name: str
    quality: float
    cost_per_1k: float
    cost_saving: float | None  # None: the reference is free
    floor_hold_rate: float
    models: tuple[str, ...]


@dataclass(frozen=True)
class BenchmarkReplay:
    """One benchmark's strategies side by side, with the router's full floor report."""

    benchmark: str
    n: int
    candidates: int
    floor: float
    reference_quality: float
    strategies: tuple[StrategyResult, ...]
    router: FloorReport


def per_task_choice(
    table: OutcomeTable, train: IntArray, cols: list[int], fraction: float, reference: int
) -> int:
    """Cheapest candidate that meets a floor of `fraction` x the reference column on the
    training rows by the service's rule (`relative_floor_margin`: both columns' uncertainty;
    until 2026-12-07 the candidate's Wilson lower bound against the reference's mean, the
    service's rule before 2026-12-06); the reference meets its own."""
    cost = table.costs[train].mean(axis=0)
    n = len(train)

    def interval(j: int) -> tuple[float, float, float]:
        successes = float(table.scores[train, j].sum())
        low, high = wilson_interval(successes, n)
        return successes / n, low, high

    ref_mean, _, ref_upper = interval(reference)
    ok = [j for j in cols if j == reference or relative_floor_margin(
        *interval(j)[:2], ref_mean, ref_upper, fraction) >= 0.0]
    return min(ok, key=lambda j: cost[j]) if ok else reference


def reference_strategy(spec: FloorSpec) -> str:
    """The name of the always-reference strategy: `always-best` when the reference is the best
    candidate on each training fold, `always-reference` when one was named."""
    return "always-best" if spec.reference is None else "always-reference"


def oracle_choice(table: OutcomeTable, cols: list[int]) -> IntArray:
    """Per prompt: the cheapest candidate with the top score on that prompt."""
    scores, costs = table.scores[:, cols], table.costs[:, cols]
    top = scores >= scores.max(axis=1, keepdims=True)
    masked = np.where(top, costs, np.inf)
    picked: IntArray = np.array(cols, dtype=np.int64)[masked.argmin(axis=1)]
    return picked


def _result(
    name: str,
    table: OutcomeTable,
    test: IntArray,
    chosen: IntArray,
    ref: IntArray,
    fraction: float,
    rng: np.random.Generator,
) -> StrategyResult:
    achieved, ref_scores = table.scores[test, chosen], table.scores[test, ref]
    cost, ref_cost = table.costs[test, chosen].sum(), table.costs[test, ref].sum()
    return StrategyResult(
        name=name,
        quality=float(achieved.mean()),
        cost_per_1k=float(cost) / len(test) * 1000,
        cost_saving=cost_saving(float(cost), float(ref_cost)),
        floor_hold_rate=floor_hold_rate(achieved, ref_scores, fraction, rng, 1000),
        models=tuple(sorted({table.models[int(j)] for j in np.unique(chosen)})),
    )


def benchmark_replay(
    table: OutcomeTable, benchmark: str, spec: FloorSpec, config: FitConfig, k: int, seed: int
) -> BenchmarkReplay:
    """Replay one benchmark's table (priced candidates) with all strategies."""
    report = floor_replay(table, spec, config, k, seed)
    cols = [j for j in range(len(table.models)) if np.all(np.isfinite(table.costs[:, j]))]
    test = np.concatenate([f.test for f in report.folds])
    ref = np.concatenate([np.full(len(f.test), f.reference) for f in report.folds])
    all_rows = np.arange(len(table), dtype=np.int64)
    per_task = np.concatenate(
        [
            np.full(
                len(f.test),
                per_task_choice(
                    table, np.setdiff1d(all_rows, f.test), cols, spec.fraction, f.reference
                ),
            )
            for f in report.folds
        ]
    )
    cheapest = min(cols, key=lambda j: float(np.mean(table.costs[:, j])))
    rng = np.random.default_rng(seed + 7)
    choices = {
        reference_strategy(spec): ref,
        "always-cheapest": np.full(len(test), cheapest),
        "random": np.array(cols, dtype=np.int64)[rng.integers(0, len(cols), len(test))],
        "per-task-floor": per_task,
        "per-request": np.concatenate([f.chosen for f in report.folds]),
        "oracle": oracle_choice(table, cols)[test],
    }
    results = tuple(
        _result(name, table, test, chosen, ref, spec.fraction, rng)
        for name, chosen in choices.items()
    )
    return BenchmarkReplay(
        benchmark=benchmark,
        n=len(table),
        candidates=len(cols),
        floor=report.floor,
        reference_quality=report.reference_quality,
        strategies=results,
        router=report,
    )
