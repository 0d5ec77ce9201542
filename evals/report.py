"""Replay results as JSON-ready objects and as plain text tables (no computation here).

`pair_json`/`multi_json` build the one JSON object `eval replay --json` prints (CPT values as
shares in [0, 1]); `pair_text`/`multi_text` the human-readable report.
"""

from __future__ import annotations

import math
from dataclasses import asdict

from evals.floor import FloorReport
from evals.metrics import CurveSummary
from evals.multi import BenchmarkReplay
from evals.replay import PairReplay

Json = float | int | str | bool | None | list["Json"] | dict[str, "Json"]


def finite_or_none(value: float) -> float | None:
    """`value`, or None when it is not finite: JSON has no Infinity or NaN (a calibrated
    threshold of +inf, "nothing clears the bar: the reference only", is written null)."""
    return value if math.isfinite(value) else None


def json_safe(obj: object) -> Json:
    """`obj` (JSON-ready dicts, lists, numbers, strings) with every non-finite float as None,
    so that `json.dumps(..., allow_nan=False)` writes valid JSON."""
    if isinstance(obj, float):
        return finite_or_none(obj)
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    raise TypeError(f"not JSON-ready: {type(obj).__name__}")


def curve_json(summary: CurveSummary) -> dict[str, Json]:
    """APGR, CPTs and the curve points of one strategy."""
    return {
        "apgr": summary.apgr,
        "cpt50": summary.cpt50,
        "cpt80": summary.cpt80,
        "curve": [{"strong_share": p.strong_share, "quality": p.quality} for p in summary.points],
    }


def floor_json(report: FloorReport | None) -> dict[str, Json]:
    """Floor-mode fields (all null when no floor was asked for)."""
    keys = (
        "quality",
        "strong_share",
        "reference_share",
        "floor_hold_rate",
        "cost_saving",
        "floor",
        "reference_quality",
        "cost_per_1k",
        "reference_cost_per_1k",
        "shares",
        "references",
        "thresholds",
    )
    if report is None:
        return dict.fromkeys(keys)
    return {
        "quality": report.quality,
        "strong_share": report.strong_share,
        "reference_share": report.reference_share,
        "floor_hold_rate": report.floor_hold_rate,
        "cost_saving": report.cost_saving,
        "floor": report.floor,
        "reference_quality": report.reference_quality,
        "cost_per_1k": report.cost_per_1k,
        "reference_cost_per_1k": report.reference_cost_per_1k,
        "shares": dict(report.shares),
        "references": list(report.references),
        "thresholds": [
            {"kind": f.calibration.kind, "threshold": finite_or_none(f.calibration.threshold)}
            for f in report.folds
        ],
    }


def pair_json(
    replay: PairReplay, floor: FloorReport | None, meta: dict[str, Json]
) -> dict[str, Json]:
    """The JSON object of a two-model replay."""
    out: dict[str, Json] = dict(meta)
    out.update(strong=replay.strong, weak=replay.weak, n=replay.n)
    out.update(curve_json(replay.router))
    out.update(weak_quality=replay.router.weak_quality, strong_quality=replay.router.strong_quality)
    out["random"] = curve_json(replay.random)
    out["oracle"] = curve_json(replay.oracle)
    out.update(floor_json(floor))
    return out


def multi_json(results: list[BenchmarkReplay], meta: dict[str, Json]) -> dict[str, Json]:
    """The JSON object of an N-model replay (one entry per benchmark)."""
    out: dict[str, Json] = dict(meta)
    out.update(dict.fromkeys(("apgr", "cpt50", "cpt80")))
    benches: list[Json] = []
    for r in results:
        entry: dict[str, Json] = {
            "benchmark": r.benchmark,
            "n": r.n,
            "candidates": r.candidates,
            "floor": r.floor,
            "reference_quality": r.reference_quality,
            "strategies": [asdict(s) | {"models": list(s.models)} for s in r.strategies],
        }
        entry.update(floor_json(r.router))
        benches.append(entry)
    out["benchmarks"] = benches
    if len(results) == 1:
        out.update(floor_json(results[0].router))
    return out


def fmt(value: float | None, spec: str) -> str:
    """`value` formatted with `spec`, or `n/a` for an undefined metric (None)."""
    return "n/a" if value is None else format(value, spec)


def curve_line(s: CurveSummary) -> str:
    """`APGR 0.6548  CPT(50%) 31.29%  CPT(80%) 61.08%` (n/a when undefined)."""
    return (f"APGR {fmt(s.apgr, '.4f')}  CPT(50%) {fmt(s.cpt50, '.2%')}  "
            f"CPT(80%) {fmt(s.cpt80, '.2%')}")


def _curve_lines(name: str, s: CurveSummary) -> list[str]:
    pts = "  ".join(f"{p.strong_share:.0%}:{p.quality:.4f}" for p in s.points)
    undefined = s.apgr is None
    return [
        f"{name:<8} {curve_line(s)}"
        + ("  (both models have the same quality: no gap to recover)" if undefined else ""),
        f"         curve (strong share:quality) {pts}",
    ]


def floor_text(report: FloorReport) -> list[str]:
    """Lines describing a floor-mode result."""
    shares = ", ".join(
        f"{m} {v:.1%}" for m, v in sorted(report.shares.items(), key=lambda x: -x[1])
    )
    return [
        f"floor {report.fraction:.0%} x {'/'.join(report.references)} = {report.floor:.4f}; "
        f"held-out quality {report.quality:.4f} (reference {report.reference_quality:.4f})",
        f"floor held in {report.floor_hold_rate:.1%} of bootstrap resamples; "
        f"reference share {report.reference_share:.1%}; cost ${report.cost_per_1k:.4f}/1k vs "
        f"${report.reference_cost_per_1k:.4f}/1k (saving {fmt(report.cost_saving, '.1%')})",
        f"shares: {shares}",
    ]


def pair_text(replay: PairReplay, floor: FloorReport | None, header: str) -> str:
    """The human-readable two-model report."""
    lines = [
        header,
        f"strong {replay.strong} ({replay.router.strong_quality:.4f}), weak "
        f"{replay.weak} ({replay.router.weak_quality:.4f}), {replay.n} prompts",
    ]
    for name, summary in (
        ("router", replay.router),
        ("random", replay.random),
        ("oracle", replay.oracle),
    ):
        lines.extend(_curve_lines(name, summary))
    if floor is not None:
        lines.extend(floor_text(floor))
    return "\n".join(lines)


def multi_text(results: list[BenchmarkReplay], header: str) -> str:
    """The human-readable N-model report, one table per benchmark."""
    lines = [header]
    for r in results:
        lines.append(
            f"\n{r.benchmark}: {r.n} prompts, {r.candidates} priced candidates, "
            f"floor {r.floor:.4f} (reference held-out quality {r.reference_quality:.4f})"
        )
        lines.append(f"  {'strategy':<18}{'quality':>9}{'$/1k req':>10}{'saving':>9}"
                     f"{'floor held':>12}")
        for s in r.strategies:
            lines.append(
                f"  {s.name:<18}{s.quality:>9.4f}{s.cost_per_1k:>10.4f}"
                f"{fmt(s.cost_saving, '.1%'):>9}{s.floor_hold_rate:>12.1%}"
            )
        lines.extend("  " + line for line in floor_text(r.router))
    return "\n".join(lines)
