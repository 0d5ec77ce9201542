"""PNG plots of a run: a latency histogram and percentiles over time (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from router.loadtest.loadgen import RunResult


def _figure() -> tuple[Any, Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    return plt, fig, ax


def _nothing_answered(ax: Any) -> None:
    """An empty plot says why (no answered request), rather than showing blank axes beside a
    legend with nothing in it (matplotlib warned of that on every such run)."""
    ax.text(0.5, 0.5, "no answered request", ha="center", va="center",
            transform=ax.transAxes)


def latency_histogram(results: Sequence[RunResult], path: Path, metric: str = "e2e_s") -> Path:
    """Histogram (log-spaced bins) of one latency metric, one series per run."""
    plt, fig, ax = _figure()
    values = {r.target: np.asarray([getattr(s, metric) for s in r.ok()
                                    if getattr(s, metric) is not None]) * 1e3 for r in results}
    present = [v for v in values.values() if v.size]
    if present:
        low = max(min(float(v.min()) for v in present), 0.1)
        high = max(float(v.max()) for v in present)
        bins = np.geomspace(low, max(high, low * 1.01), 60)
        for target, v in values.items():
            if v.size:
                ax.hist(v, bins=bins, histtype="step", label=f"{target} (n={v.size})")
        ax.set_xscale("log")
        ax.legend(loc="best", fontsize=8)
    else:
        _nothing_answered(ax)
    ax.set_xlabel(f"{metric.removesuffix('_s').upper()} (ms)")
    ax.set_ylabel("requests")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def percentiles_over_time(result: RunResult, path: Path, window_s: float = 5.0,
                          metric: str = "e2e_s") -> Path:
    """p50/p90/p99 of `metric` per `window_s` window of send time."""
    plt, fig, ax = _figure()
    points = sorted((s.started, getattr(s, metric)) for s in result.ok()
                    if getattr(s, metric) is not None)
    if points:
        starts = np.asarray([p[0] for p in points])
        vals = np.asarray([p[1] for p in points]) * 1e3
        edges = np.arange(0.0, float(starts.max()) + window_s, window_s)
        centers: list[float] = []
        series: dict[int, list[float]] = {50: [], 90: [], 99: []}
        for left in edges:
            chosen = vals[(starts >= left) & (starts < left + window_s)]
            if chosen.size:
                centers.append(left + window_s / 2)
                for q, out in series.items():
                    out.append(float(np.percentile(chosen, q)))
        for q, out in series.items():
            ax.plot(centers, out, marker=".", label=f"p{q}")
        ax.set_yscale("log")
        ax.legend(loc="best", fontsize=8)
    else:
        _nothing_answered(ax)
    ax.set_xlabel(f"send time (s), {window_s:g} s windows")
    ax.set_ylabel(f"{metric.removesuffix('_s').upper()} (ms)")
    ax.set_title(result.target)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
