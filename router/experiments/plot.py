"""Drawing of an experiment report to a PNG (matplotlib, Agg backend, no display needed).

Left: each arm's TTFT (solid) and E2E (dashed) distributions as CDFs on a log time axis.
Right: each arm-vs-control difference with its bootstrap interval, relative to control.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from router.experiments.report import QUANTILE_GRID, ExperimentReport


def _draw_distributions(ax: Axes, report: ExperimentReport) -> None:
    for index, arm in enumerate(report.arms):
        colour = f"C{index}"
        label = arm.name + (" (control)" if arm.control else "") + (" halted" if arm.halted else "")
        if arm.ttft_quantiles_ms:
            ax.plot(arm.ttft_quantiles_ms, QUANTILE_GRID, color=colour, label=f"{label} TTFT")
        if arm.e2e_quantiles_ms:
            ax.plot(arm.e2e_quantiles_ms, QUANTILE_GRID, color=colour, linestyle="--",
                    label=f"{label} E2E")
    ax.set_xscale("log")
    ax.set_xlabel("ms (log scale)")
    ax.set_ylabel("cumulative share of requests")
    ax.set_title("latency distributions")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")


def _draw_intervals(ax: Axes, report: ExperimentReport) -> None:
    rows = [c for c in report.comparisons if c.control_value != 0]
    for y, c in enumerate(rows):
        scale = 100.0 / abs(c.control_value)
        colour = "C3" if c.excludes_zero else "C0"
        ax.errorbar(c.difference * scale, y,
                    xerr=[[(c.difference - c.low) * scale], [(c.high - c.difference) * scale]],
                    fmt="o", color=colour, capsize=3)
    ax.set_yticks(range(len(rows)), [f"{c.arm}: {c.metric} {c.statistic}" for c in rows],
                  fontsize="small")
    ax.axvline(0.0, color="grey", linewidth=1)
    ax.set_xlabel("difference vs control (% of control)")
    ax.set_title("metric intervals (red: excludes 0)")
    ax.grid(True, axis="x", alpha=0.3)


def plot_report(report: ExperimentReport, path: Path) -> Path:
    """Draw the report's latency distributions and metric intervals to a PNG at `path`."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5))
    try:
        _draw_distributions(left, report)
        _draw_intervals(right, report)
        figure.suptitle(f"experiment {report.name}")
        figure.tight_layout()
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)
    return path
