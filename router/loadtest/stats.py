"""Summaries of a run: achieved rate, E2E/TTFT/TPOT percentiles, errors by class, segments.

Pure functions over `Sample`s. Percentiles are reported at p50/p90/p95/p99 (DESIGN.md §1: never
an average alone), for all requests and per segment (request class; stream or not; the router's
cache status when it answers with `x-slorouter-cache`). TPOT is DESIGN.md's, as the router records
it (`router.loadtest.loadgen.stream_tpot`); `tpot_tokens` counts the streams whose output tokens
came from the server's usage and those whose content chunks were counted (no usage sent).

Percentiles interpolate linearly between the two nearest ranks (numpy's default, Hyndman and
Fan's type 7): the q-th of n sorted values sits at rank q/100 * (n - 1), counted from 0. So the
p50 of 1..10 is 5.5 and its p99 9.91; with fewer than 101 values p99 lies between the two
largest, and with 200 (the side-by-side page's least) between the 3rd and 2nd largest.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from router.loadtest.loadgen import LAG_BOUND_MS, RunResult, Sample

QUANTILES = (50, 90, 95, 99)
# The summary's name of each metric (its values in milliseconds) and the `Sample` field (seconds)
# it comes from.
METRICS = {"e2e": "e2e_s", "ttft": "ttft_s", "tpot": "tpot_s"}


@dataclass(frozen=True, slots=True)
class Percentiles:
    count: int
    p50: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values_s: Sequence[float]) -> Percentiles:
        if not values_s:
            nan = float("nan")
            return cls(0, nan, nan, nan, nan)
        p = np.percentile(np.asarray(values_s) * 1e3, QUANTILES)
        return cls(len(values_s), float(p[0]), float(p[1]), float(p[2]), float(p[3]))


@dataclass(frozen=True, slots=True)
class Summary:
    target: str
    sent: int
    ok: int
    target_rate: float
    achieved_rate: float  # as sent: gaps between the first and the last send
    completed_rate: float  # ok / wall time until the last answer
    latency_ms: dict[str, Percentiles]  # from each request's scheduled arrival
    dispatch_lag_ms: Percentiles  # how late the generator sent after the schedule (included)
    generator_behind: bool  # lag p99 over `LAG_BOUND_MS`: the run did not hold its schedule
    errors: dict[str, int]
    segments: dict[str, dict[str, Percentiles]]
    tpot_tokens: dict[str, int]  # TPOT samples by where their output tokens came from


def _metric(samples: Iterable[Sample], name: str) -> list[float]:
    return [v for s in samples if (v := getattr(s, name)) is not None]


def _ok(samples: Iterable[Sample]) -> list[Sample]:
    return [s for s in samples if s.status == 200 and s.error is None]


def _class_key(cls: str) -> str:
    """A request class's segment name; `class=NAME` when the name is one of the other
    segments' (a class called `stream` would otherwise pool with every streamed request, and
    count twice in it)."""
    taken = cls in ("stream", "non-stream") or cls.startswith(("cache=", "class="))
    return f"class={cls}" if taken else cls


def summarize(result: RunResult) -> Summary:
    ok = _ok(result.samples)
    errors = Counter(s.error or f"http_{s.status}" for s in result.samples
                     if not (s.status == 200 and s.error is None))
    segments: dict[str, dict[str, Percentiles]] = {}
    groups: dict[str, list[Sample]] = {}
    for sample in ok:
        groups.setdefault(_class_key(sample.cls), []).append(sample)
    for sample in ok:
        groups.setdefault("stream" if sample.stream else "non-stream", []).append(sample)
        if sample.cache is not None:
            groups.setdefault(f"cache={sample.cache}", []).append(sample)
    for key in sorted(groups, key=lambda k: (k.startswith(("stream", "non-stream", "cache=")),
                                             k)):
        segments[key] = {m: Percentiles.of(_metric(groups[key], f)) for m, f in METRICS.items()}
    return Summary(
        target=result.target, sent=len(result.samples), ok=len(ok),
        target_rate=result.rate,
        achieved_rate=result.achieved_rate,
        completed_rate=len(ok) / result.wall_s if result.wall_s else 0.0,
        latency_ms={m: Percentiles.of(_metric(ok, f)) for m, f in METRICS.items()},
        dispatch_lag_ms=Percentiles.of([s.lag_s for s in result.samples]),
        generator_behind=result.generator_behind,
        errors=dict(sorted(errors.items())), segments=segments,
        tpot_tokens=dict(sorted(Counter(s.tpot_tokens for s in ok
                                        if s.tpot_s is not None and s.tpot_tokens).items())))


def _row(name: str, p: Percentiles) -> str:
    return (f"  {name:<26}{p.count:>7}{p.p50:>10.1f}{p.p90:>10.1f}{p.p95:>10.1f}"
            f"{p.p99:>10.1f}")


def format_summary(summary: Summary) -> str:
    """A plain-text report (milliseconds)."""
    lines = [f"target {summary.target}: sent {summary.sent}, ok {summary.ok}, "
             f"rate target {summary.target_rate:g}/s, achieved {summary.achieved_rate:.2f}/s, "
             f"completed {summary.completed_rate:.2f}/s",
             f"  {'metric (ms)':<26}{'n':>7}{'p50':>10}{'p90':>10}{'p95':>10}{'p99':>10}"]
    lines += [_row(m.upper(), p) for m, p in summary.latency_ms.items()]
    lines.append(_row("dispatch lag (in the above)", summary.dispatch_lag_ms))
    if summary.tpot_tokens:
        lines.append(_tpot_note(summary.tpot_tokens))
    if summary.generator_behind:
        lines.append(f"  WARNING: the load generator fell behind its schedule (dispatch lag p99 "
                     f"{summary.dispatch_lag_ms.p99:.1f} ms > {LAG_BOUND_MS:g} ms): the target "
                     "did not get this rate, and the latencies above include the generator's "
                     "lag; rerun at a lower rate or on a less loaded machine")
    lines.append("  errors: " + (", ".join(f"{k}={v}" for k, v in summary.errors.items())
                                 if summary.errors else "none"))
    lines.append("  by segment (E2E / TTFT / TPOT p50 p90 p95 p99):")
    for key, metrics in summary.segments.items():
        for metric, p in metrics.items():
            if p.count:
                lines.append(_row(f"{key} {metric.upper()}", p))
    return "\n".join(lines)


def _tpot_note(sources: dict[str, int]) -> str:
    """Which output tokens TPOT divides by: a run whose server sent no usage counted chunks,
    fewer than the tokens where a chunk carries several, and its TPOT reads high."""
    note = ("  TPOT = (t_last - t_first) / (output_tokens - 1), the tokens from usage in "
            f"{sources.get('usage', 0)} streams, from counted chunks in {sources.get('chunks', 0)}")
    if sources.get("chunks"):
        note += " (no usage sent: a chunk counted as one token, so TPOT may read high)"
    return note
