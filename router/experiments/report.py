"""The experiment report: one pydantic model for `GET /v1/experiments` and the CLI's table.

`build_report` turns a spec, a snapshot and its `Analysis` into an `ExperimentReport` (the
JSON the service returns); `render_table` prints it for a terminal; `report_command` is what
`slorouter experiments report NAME [--plot out.png]` calls once it has a report (from the
service's JSON or from a store). Drawing lives in `plot`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Final, Literal, TextIO

import numpy as np
from pydantic import BaseModel, ConfigDict

from policies.experiments.schema import LATENCY_METRICS, ArmSpec, ExperimentSpec
from router.experiments.analysis import Analysis, Comparison
from router.experiments.outcomes import ArmData, ExperimentData, Halt
from router.experiments.selection import selection_check
from router.experiments.sequential import SequentialResult
from router.experiments.srm import sample_ratio_check

QUANTILE_GRID: Final[tuple[float, ...]] = tuple(round(0.01 * i, 2) for i in range(1, 100))


class _Out(BaseModel):
    # A field this version does not know (a newer service's report, read by an older CLI) is
    # left out, not refused: `selection` made the previous CLI fail on every report.
    model_config = ConfigDict(extra="ignore", frozen=True)


class MetricMean(_Out):
    name: str
    count: int
    mean: float | None


class ArmReport(_Out):
    name: str
    route: str
    control: bool
    share: float
    halted: bool
    requests: int
    error_rate: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    cost_mean_usd: float | None
    metrics: list[MetricMean]
    ttft_quantiles_ms: list[float]
    e2e_quantiles_ms: list[float]


class ComparisonReport(_Out):
    arm: str
    metric: str
    statistic: Literal["p50", "p95", "mean"]
    control_value: float
    arm_value: float
    difference: float
    low: float
    high: float
    level: float
    relative: float | None
    excludes_zero: bool


class SequentialReport(_Out):
    arm: str
    metric: str
    scale: Literal["log_ratio", "difference"]
    n_control: int
    n_arm: int
    estimate: float | None
    low: float | None
    high: float | None
    p_value: float
    alpha: float
    ready: bool
    reject: bool


class HaltReport(_Out):
    arm: str
    guardrail: str
    reason: str
    at_sample: int
    observed: float
    threshold: float
    at: datetime
    persisted: bool


class SrmReport(_Out):
    """Sample-ratio-mismatch check: units per arm (counted on the arm they hash to) against
    the configured shares; `mismatch` (p < `threshold`) means every result is suspect."""

    units: dict[str, int]
    expected: dict[str, float]
    chi_square: float
    degrees_of_freedom: int
    p_value: float
    threshold: float
    ready: bool
    mismatch: bool


class SelectionReport(_Out):
    """Requests the policy barred each arm's route from (no outcome of the arm): an arm in
    `flagged` (a barred share of `limit` or more) is compared on the rest of its requests
    while control keeps all of its own, so its figures are of another mix."""

    barred: dict[str, int]
    shares: dict[str, float]
    limit: float
    flagged: list[str]


class ExperimentReport(_Out):
    name: str
    generated_at: datetime
    tasks: list[str]
    unit: str
    primary_metric: str
    alpha: float
    arms: list[ArmReport]
    comparisons: list[ComparisonReport]
    sequential: list[SequentialReport]
    halts: list[HaltReport]
    decided: list[str]
    srm: SrmReport | None = None  # None: from a service without the check
    selection: SelectionReport | None = None  # None: from a service without the check


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _quantiles(values: Sequence[float], probs: Sequence[float]) -> list[float]:
    if not values:
        return []
    return [float(q) for q in np.quantile(np.asarray(values, dtype=np.float64), probs)]


def _arm_report(spec: ExperimentSpec, arm_spec: ArmSpec, arm: ArmData, halted: bool) -> ArmReport:
    ttft, e2e = arm.samples("ttft_ms").reservoir, arm.samples("e2e_ms").reservoir
    t50, t95 = _quantiles(ttft, (0.5, 0.95)) or (None, None)
    e50, e95 = _quantiles(e2e, (0.5, 0.95)) or (None, None)
    cost, errors = arm.samples("cost_usd"), arm.samples("error")
    metrics = [MetricMean(name=m.name, count=arm.samples(m.name).count,
                          mean=_finite(arm.samples(m.name).mean)) for m in spec.metrics]
    return ArmReport(
        name=arm_spec.name, route=arm_spec.route, control=arm_spec.control, share=arm_spec.share,
        halted=halted, requests=arm.requests, error_rate=_finite(errors.mean),
        ttft_p50_ms=t50, ttft_p95_ms=t95, e2e_p50_ms=e50, e2e_p95_ms=e95,
        cost_mean_usd=_finite(cost.mean), metrics=metrics,
        ttft_quantiles_ms=_quantiles(ttft, QUANTILE_GRID),
        e2e_quantiles_ms=_quantiles(e2e, QUANTILE_GRID),
    )


def _comparison_report(c: Comparison) -> ComparisonReport:
    i = c.interval
    relative = i.difference / i.control_value if i.control_value != 0 else None
    return ComparisonReport(
        arm=c.arm, metric=c.metric, statistic=i.statistic, control_value=i.control_value,
        arm_value=i.arm_value, difference=i.difference, low=i.low, high=i.high, level=i.level,
        relative=relative, excludes_zero=i.excludes_zero,
    )


def _sequential_report(r: SequentialResult) -> SequentialReport:
    return SequentialReport(
        arm=r.arm, metric=r.metric,
        scale="log_ratio" if r.metric in LATENCY_METRICS else "difference",
        n_control=r.n_control, n_arm=r.n_arm, estimate=_finite(r.estimate),
        low=_finite(r.low), high=_finite(r.high), p_value=r.p_value, alpha=r.alpha,
        ready=r.ready, reject=r.reject,
    )


def _halt_report(h: Halt, persisted: bool) -> HaltReport:
    return HaltReport(arm=h.arm, guardrail=h.guardrail, reason=h.reason, at_sample=h.at_sample,
                      observed=h.observed, threshold=h.threshold, at=h.at, persisted=persisted)


def build_report(
    spec: ExperimentSpec, data: ExperimentData, analysis: Analysis, *, now: datetime
) -> ExperimentReport:
    """The report of one snapshot; halts found by `analysis` but not yet stored are flagged."""
    halted = data.halted  # only stored halts: a pending one does not stop traffic yet
    halts = [_halt_report(h, True) for h in data.halts]
    halts += [_halt_report(h, False) for h in analysis.new_halts]
    return ExperimentReport(
        name=spec.name, generated_at=now, tasks=list(spec.tasks), unit=spec.unit,
        primary_metric=spec.sequential.primary_metric, alpha=spec.sequential.alpha,
        arms=[_arm_report(spec, a, data.arm(a.name), a.name in halted) for a in spec.arms],
        comparisons=[_comparison_report(c) for c in analysis.comparisons],
        sequential=[_sequential_report(r) for r in analysis.sequential],
        halts=halts, decided=sorted(analysis.decided),
        srm=_srm_report(spec, data), selection=_selection_report(spec, data),
    )


def _srm_report(spec: ExperimentSpec, data: ExperimentData) -> SrmReport:
    check = sample_ratio_check(data.assigned, {a.name: a.share for a in spec.arms})
    return SrmReport(units=check.units, expected=check.expected, chi_square=check.chi_square,
                     degrees_of_freedom=check.degrees_of_freedom, p_value=check.p_value,
                     threshold=check.threshold, ready=check.ready, mismatch=check.mismatch)


def _selection_report(spec: ExperimentSpec, data: ExperimentData) -> SelectionReport:
    check = selection_check(data.barred, {a.name: data.arm(a.name).requests for a in spec.arms})
    return SelectionReport(barred=check.barred, shares=check.shares, limit=check.limit,
                           flagged=list(check.flagged))


def _selection_line(report: ExperimentReport) -> str:
    selection = report.selection
    if selection is None:
        return "policy selection: not reported"
    if not selection.flagged:
        return f"policy selection: ok (no arm had {selection.limit:.0%} of its requests barred)"
    arms = ", ".join(f"{arm} {selection.barred[arm]} ({selection.shares[arm]:.0%})"
                     for arm in selection.flagged)
    return (f"policy selection: requests barred by the policy: {arms}; those arms are "
            "compared on the rest of their requests, control on all of its own: their "
            "figures are of another mix (restrict the experiment's tasks to traffic every "
            "arm may serve)")


def _srm_line(report: ExperimentReport) -> str:
    srm = report.srm
    if srm is None:
        return "sample ratio: not reported"
    units = ", ".join(f"{arm} {n} (expected {srm.expected[arm]:.0f})"
                      for arm, n in srm.units.items())
    if not srm.ready:
        return f"sample ratio: too few units to check yet ({units})"
    verdict = (f"MISMATCH (p < {srm.threshold:g}): assignment does not follow the shares, "
               "every result above is suspect" if srm.mismatch else "ok")
    return (f"sample ratio: units {units}; chi-square {srm.chi_square:.2f} "
            f"(df {srm.degrees_of_freedom}), p = {srm.p_value:.4g}: {verdict}")


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return lines


def _arm_rows(report: ExperimentReport) -> list[list[str]]:
    return [[
        a.name + (" (control)" if a.control else "") + (" HALTED" if a.halted else ""),
        f"{a.share:.0%}", str(a.requests), _num(a.error_rate, ".2%"),
        _num(a.ttft_p50_ms, ".0f"), _num(a.ttft_p95_ms, ".0f"), _num(a.e2e_p50_ms, ".0f"),
        _num(a.e2e_p95_ms, ".0f"), _num(a.cost_mean_usd, ".6f"),
    ] for a in report.arms]


def _comparison_rows(report: ExperimentReport) -> list[list[str]]:
    return [[
        c.arm, f"{c.metric} {c.statistic}", f"{c.control_value:.4g}", f"{c.arm_value:.4g}",
        f"{c.difference:+.4g}", f"[{c.low:+.4g}, {c.high:+.4g}]",
        _num(c.relative, "+.1%"), "*" if c.excludes_zero else "",
    ] for c in report.comparisons]


def _sequential_rows(report: ExperimentReport) -> list[list[str]]:
    rows: list[list[str]] = []
    for s in report.sequential:
        if s.metric == report.primary_metric or s.reject:
            effect = "ratio " if s.scale == "log_ratio" else ""
            est, low, high = (
                (_exp(s.estimate), _exp(s.low), _exp(s.high)) if s.scale == "log_ratio"
                else (s.estimate, s.low, s.high)
            )
            decision = "significant" if s.reject else ("running" if s.ready else "warming up")
            rows.append([s.arm, s.metric, f"{effect}{_num(est, '.4g')}",
                         f"[{_num(low, '.4g')}, {_num(high, '.4g')}]", f"{s.p_value:.4f}",
                         decision])
    return rows


def _exp(value: float | None) -> float | None:
    return None if value is None else math.exp(value)


def render_table(report: ExperimentReport) -> str:
    """A plain-text report: arms, differences with intervals, sequential tests, halts."""
    lines = [f"experiment {report.name}  unit={report.unit}  tasks={','.join(report.tasks)}  "
             f"alpha={report.alpha:g}  at {report.generated_at.isoformat()}", ""]
    lines += _table(["arm", "share", "requests", "errors", "ttft p50", "ttft p95", "e2e p50",
                     "e2e p95", "cost/req $"], _arm_rows(report))
    lines += ["", f"differences vs control (bootstrap, level {1 - report.alpha:g}; * = excludes 0)"]
    lines += _table(["arm", "metric", "control", "arm", "diff", "interval", "rel", ""],
                    _comparison_rows(report))
    lines += ["", "always-valid tests (mSPRT; primary metric and significant ones)"]
    lines += _table(["arm", "metric", "estimate", "confidence seq.", "p", "decision"],
                    _sequential_rows(report))
    lines += ["", _srm_line(report), _selection_line(report)]
    lines += ["", "halts:" if report.halts else "halts: none"]
    lines += [f"  {h.arm}: {h.guardrail} at sample {h.at_sample} ({h.at.isoformat()}): "
              f"{h.reason}{'' if h.persisted else ' [pending]'}" for h in report.halts]
    return "\n".join(lines) + "\n"


def report_command(report: ExperimentReport, *, out: TextIO, plot_path: Path | None = None) -> int:
    """`slorouter experiments report NAME [--plot out.png]`: print the table, draw if asked."""
    out.write(render_table(report))
    if plot_path is not None:
        from router.experiments.plot import plot_report

        plot_report(report, plot_path)
        out.write(f"plot written to {plot_path}\n")
    return 0
