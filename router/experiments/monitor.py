"""The async glue the service runs: halt on guardrails, read halts, build a report.

Each function reads one snapshot from an `OutcomeStore`, calls the pure analysis and, for
halts only, writes back. The service calls `enforce_guardrails` on a timer and feeds
`halted_arms` to the assigner; `GET /v1/experiments` and the CLI call `report_from_store`
(whose analysis runs in a worker thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import datetime

import numpy as np

from policies.experiments.schema import ExperimentSpec
from router.experiments.analysis import analyze
from router.experiments.guardrails import evaluate_guardrails, guarded_windows
from router.experiments.outcomes import Halt, OutcomeStore
from router.experiments.report import ExperimentReport, build_report


async def enforce_guardrails(
    spec: ExperimentSpec, store: OutcomeStore, now: datetime
) -> tuple[Halt, ...]:
    """Evaluate guardrails and persist new halts; returns those this call stored. Reads only
    the guarded metrics' windows (`guarded_windows`), not the whole experiment."""
    data = await store.snapshot(spec.name, guarded_windows(spec))
    stored = [h for h in evaluate_guardrails(spec, data, now) if await store.halt(spec.name, h)]
    return tuple(stored)


async def halted_arms(
    store: OutcomeStore, specs: Iterable[ExperimentSpec]
) -> dict[str, frozenset[str]]:
    """Halted arm names by experiment, the `halted` argument of `Assigner.assign` (no metric
    values are read)."""
    return {spec.name: (await store.snapshot(spec.name, {})).halted for spec in specs}


async def report_from_store(
    spec: ExperimentSpec,
    store: OutcomeStore,
    *,
    now: datetime,
    rng: np.random.Generator,
    resamples: int = 1000,
    previous_p: Mapping[tuple[str, str], float] | None = None,
) -> ExperimentReport:
    """Snapshot, analyse and build the report of one experiment (no writes). The analysis
    (bootstraps over full reservoirs: a few hundred ms of numpy) runs in a worker thread on
    the frozen snapshot: on the event loop it stalled every request in flight that long."""
    data = await store.snapshot(spec.name)

    def built() -> ExperimentReport:
        analysis = analyze(spec, data, now=now, rng=rng, resamples=resamples,
                           previous_p=previous_p)
        return build_report(spec, data, analysis, now=now)

    return await asyncio.to_thread(built)
