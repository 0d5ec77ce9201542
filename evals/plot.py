"""Plots: a two-model replay's quality-vs-strong-share curve with random and oracle baselines,
and an N-model replay's strategies as cost-vs-quality points per benchmark.

Matplotlib with the Agg backend (no display); imported only by the `eval replay --plot` handler.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import FigureCanvasAgg

from evals.metrics import CurveSummary
from evals.multi import BenchmarkReplay
from evals.replay import PairReplay
from policies.files import write_file


def image_formats() -> tuple[str, ...]:
    """The file extensions `savefig` can write with this backend (png, pdf, svg, ...)."""
    return tuple(sorted(FigureCanvasAgg.get_supported_filetypes()))


def _save(fig: object, out: Path) -> None:
    """Render the figure in memory, then write it through a temporary file renamed into
    place: a write cut short (a full disk) leaves the previous plot, not a broken image."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=out.suffix.lstrip(".").lower(), dpi=100)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    write_file(out, buffer.getvalue())


def _draw(ax: object, name: str, summary: CurveSummary, style: str) -> None:
    xs = [p.strong_share * 100 for p in summary.points]
    ys = [p.quality for p in summary.points]
    apgr = "n/a" if summary.apgr is None else f"{summary.apgr:.3f}"
    ax.plot(xs, ys, style, label=f"{name} (APGR {apgr})")  # type: ignore[attr-defined]


def plot_pair(replay: PairReplay, title: str, out: Path) -> Path:
    """Draw router, random and oracle curves with the two models' qualities; save to `out`."""
    fig, ax = plt.subplots(figsize=(8, 5))
    _draw(ax, "router", replay.router, "o-")
    _draw(ax, "random", replay.random, "s--")
    _draw(ax, "oracle", replay.oracle, "x:")
    ax.axhline(replay.router.strong_quality, color="red", linestyle="--", label=replay.strong)
    ax.axhline(replay.router.weak_quality, color="grey", linestyle="--", label=replay.weak)
    ax.set_xlabel("strong model calls (%)")
    ax.set_ylabel("quality")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    _save(fig, out)
    return out


def plot_multi(results: list[BenchmarkReplay], out: Path) -> Path:
    """One panel per benchmark: each strategy as a point of USD per 1k prompts vs quality."""
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 5), squeeze=False)
    for ax, res in zip(axes[0], results, strict=True):
        for s in res.strategies:
            ax.scatter(max(s.cost_per_1k, 1e-4), s.quality, label=s.name)
        ax.axhline(res.floor, color="red", linestyle="--", label=f"floor {res.floor:.3f}")
        ax.set_xscale("log")
        ax.set_xlabel("USD per 1,000 prompts (log)")
        ax.set_ylabel("quality")
        ax.set_title(res.benchmark)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _save(fig, out)
    return out
