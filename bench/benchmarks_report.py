"""Results of `bench/vs_litellm.py` and their rendering as `docs/benchmarks.md`.

`Point` is one (target, rate, streaming, round) measurement; `Running` a started target and its
points. The rest are pure functions from points to Markdown tables and comparisons. A run of
several rounds measures every target once per round at each rate; its tables show the median
round's figures (`median_point`) and its comparisons the median and range of the per-round
ratios, each taken between points measured minutes apart at most.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.loadtest.loadgen import LAG_BOUND_MS, RunResult, generator_behind
from tests.support.procs import ManagedProcess

SLO_P99_MS = 100.0


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # direct | slorouter | litellm
    config: str | None = None
    telemetry: str | None = None
    model: str = "bench"
    authenticated: bool = False


@dataclass(frozen=True)
class Point:
    """One measured (target, rate, streaming) point, as numbers (ms), so it can be saved."""

    target: str
    rate: float
    stream: bool
    sent: int
    errors: int
    e2e: tuple[float, float]  # p50, p99
    ttft: tuple[float, float]
    cpu_ms: float | None
    rss_mb: float | None
    busy_cpu_ms: float | None = None  # cpu_ms less the gateway's idle CPU over the same window
    round: int = 0  # which round of the run measured it (runs saved before rounds: 0)
    lag_p99_ms: float | None = None  # the generator's dispatch lag (runs saved before: None)

    @classmethod
    def of(cls, result: RunResult, stream: bool, cpu_ms: float | None,
           rss_mb: float | None, busy_cpu_ms: float | None = None,
           round_no: int = 0) -> Point:
        e2e, ttft = result.percentiles_ms("e2e_s"), result.percentiles_ms("ttft_s")
        return cls(result.target, result.rate, stream, len(result.samples), result.errors(),
                   (e2e[0], e2e[1]), (ttft[0], ttft[1]), cpu_ms, rss_mb, busy_cpu_ms, round_no,
                   result.lag_p99_ms())

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Point:
        return cls(**{**raw, "e2e": tuple(raw["e2e"]), "ttft": tuple(raw["ttft"])})

    def p(self, metric: str) -> tuple[float, float]:
        return self.e2e if metric == "e2e_s" else self.ttft

    @property
    def generator_behind(self) -> bool:
        return generator_behind(self.lag_p99_ms)

    @property
    def sustained(self) -> bool:
        """p99 E2E under the bound, no errors, and the rate was really offered: a point whose
        load generator fell behind its schedule shows nothing about the target at that rate."""
        return self.errors == 0 and self.e2e[1] < SLO_P99_MS and not self.generator_behind


@dataclass
class Running:
    target: Target
    url: str
    api_key: str | None
    proc: ManagedProcess | None
    points: list[Point] = field(default_factory=list)
    idle_cpu_per_s: float = 0.0


def _f(value: float | None, digits: int = 2) -> str:
    return "—" if value is None or value != value else f"{value:.{digits}f}"


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


# How long a gateway's idle CPU is read, subtracted from its busy CPU per request: a whole
# multiple of slorouter-full's 15 s metric export (`configs/telemetry.json`), so the window
# holds three exports whatever its phase. A window of 5 s held one or none (0.02 to 1.5 ms/s:
# 0.3 ms a request at 5 req/s, the benchmark audit of 2026-12-07).
IDLE_WINDOW_S = 45.0


def median_point(points: Sequence[Point]) -> Point:
    """The rounds of one (target, rate, streaming) point as one: each figure the median of the
    rounds' (requests and errors summed, memory the largest), so one slow round moves none."""
    if len(points) == 1:
        return points[0]
    first = points[0]

    def pair(of: Callable[[Point], tuple[float, float]]) -> tuple[float, float]:
        return (statistics.median(of(p)[0] for p in points),
                statistics.median(of(p)[1] for p in points))

    rss = [p.rss_mb for p in points if p.rss_mb is not None]
    lags = [p.lag_p99_ms for p in points if p.lag_p99_ms is not None]
    return Point(first.target, first.rate, first.stream, sum(p.sent for p in points),
                 sum(p.errors for p in points), pair(lambda p: p.e2e),
                 pair(lambda p: p.ttft), _median([p.cpu_ms for p in points]),
                 max(rss) if rss else None, _median([p.busy_cpu_ms for p in points]), -1,
                 max(lags) if lags else None)


def _rounds(running: Running, rate: float, stream: bool) -> list[Point]:
    return sorted((p for p in running.points if p.rate == rate and p.stream == stream),
                  key=lambda p: p.round)


def _point(running: Running, rate: float, stream: bool) -> Point | None:
    rounds = _rounds(running, rate, stream)
    return median_point(rounds) if rounds else None


def per_round(runs: Sequence[Running], rate: float, stream: bool) -> list[list[Point]]:
    """The points of `runs` at one rate, grouped by the round that measured them: only rounds
    in which every one of `runs` was measured."""
    by_round = [{p.round: p for p in _rounds(r, rate, stream)} for r in runs]
    common = sorted(set.intersection(*(set(d) for d in by_round))) if by_round else []
    return [[d[n] for d in by_round] for n in common]


def spread(values: Sequence[float]) -> str:
    """One figure, or the median of several with their range: `0.09 [0.07–0.11]`."""
    if len(values) == 1:
        return _f(values[0])
    return f"{_f(statistics.median(values))} [{_f(min(values))}–{_f(max(values))}]"


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def latency_table(targets: list[Running], rates: list[float], stream: bool) -> list[str]:
    lines = ["| rate (req/s) | target | sent | errors | E2E p50 | E2E p99 | TTFT p50 | TTFT p99 |"
             " CPU ms/req | busy CPU ms/req | RSS MB |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for rate in rates:
        for running in targets:
            point = _point(running, rate, stream)
            if point is None:
                lines.append(f"| {rate:g} | {running.target.name} | — | saturated at a lower "
                             "rate | | | | | | | |")
                continue
            e2e, ttft = point.e2e, point.ttft
            lines.append(f"| {rate:g} | {running.target.name} | {point.sent} | "
                         f"{point.errors} | {_f(e2e[0])} | {_f(e2e[1])} | "
                         f"{_f(ttft[0])} | {_f(ttft[1])} | {_f(point.cpu_ms)} | "
                         f"{_f(point.busy_cpu_ms)} | {_f(point.rss_mb, 0)} |")
    return lines


def overhead(point: Point, base: Point) -> tuple[float, float, float, float]:
    e2e, ttft = point.p("e2e_s"), point.p("ttft_s")
    b_e2e, b_ttft = base.p("e2e_s"), base.p("ttft_s")
    return e2e[0] - b_e2e[0], e2e[1] - b_e2e[1], ttft[0] - b_ttft[0], ttft[1] - b_ttft[1]


def overhead_table(targets: list[Running], rates: list[float], stream: bool) -> list[str]:
    direct = next(r for r in targets if r.target.kind == "direct")
    lines = ["| rate (req/s) | target | +E2E p50 | +E2E p99 | +TTFT p50 | +TTFT p99 | sustained |",
             "|---:|---|---:|---:|---:|---:|---|"]
    for rate in rates:
        base = _point(direct, rate, stream)
        for running in targets:
            point = _point(running, rate, stream)
            if running is direct or point is None or base is None:
                continue
            if base.generator_behind:  # no baseline: the direct run itself was sent late
                lines.append(f"| {rate:g} | {running.target.name} | — | — | — | — | "
                             f"{_sustained(point)}; no baseline (direct: load generator "
                             "behind) |")
                continue
            lines.append(f"| {rate:g} | {running.target.name} | "
                         + " | ".join(_f(v) for v in overhead(point, base))
                         + f" | {_sustained(point)} |")
    return lines


def _sustained(point: Point) -> str:
    if point.sustained:
        return "yes"
    return "no (load generator behind)" if point.generator_behind else "no"


def max_rate(running: Running, stream: bool) -> float | None:
    """The highest rate at which every round was sustained."""
    rates = {p.rate for p in running.points if p.stream == stream}
    ok = [rate for rate in rates if all(p.sustained for p in _rounds(running, rate, stream))]
    return max(ok) if ok else None


def comparisons(targets: list[Running], rates: list[float], stream: bool) -> list[str]:
    """slorouter-full against LiteLLM at rates LiteLLM sustains, and telemetry on vs off; with
    several rounds, each ratio or difference is taken within a round (median [range])."""
    by = {r.target.name: r for r in targets}
    lines: list[str] = []
    direct, full, lite = by.get("direct"), by.get("slorouter-full"), by.get("litellm")
    if direct and full and lite:
        for rate in rates:
            # a round whose direct run was sent late has no baseline to subtract (the benchmark
            # audit: a lagging direct run read as a -39 ms overhead)
            rounds = [r for r in per_round([direct, full, lite], rate, stream)
                      if not r[0].generator_behind]
            if not rounds:
                continue
            ratios = [[_ratio(a, b) for a, b in zip(overhead(f, base), overhead(ll, base),
                                                      strict=True)]
                      for base, f, ll in rounds]
            held = ("sustained" if all(ll.sustained for _, _, ll in rounds)
                    else "NOT sustained")
            f, ll = median_point([r[1] for r in rounds]), median_point([r[2] for r in rounds])
            of = [spread([r[i] for r in ratios]) for i in range(4)]
            lines.append(f"- {rate:g} req/s (LiteLLM {held}{_over(rounds)}): slorouter-full/"
                         f"LiteLLM added latency E2E p50 {of[0]}, E2E p99 {of[1]}, "
                         f"TTFT p50 {of[2]}, TTFT p99 {of[3]} (target ≤ 0.10); "
                         f"CPU/req {_f(f.cpu_ms)} vs {_f(ll.cpu_ms)} ms (busy "
                         f"{_f(f.busy_cpu_ms)} vs {_f(ll.busy_cpu_ms)})")
    on, off = by.get("slorouter-full"), by.get("slorouter-full-no-telemetry")
    if direct and on and off:
        for rate in rates:
            rounds = [r for r in per_round([direct, on, off], rate, stream)
                      if r[1].sustained and r[2].sustained]
            if not rounds:
                continue
            diffs = [[x - y for x, y in zip(overhead(a, base), overhead(b, base), strict=True)]
                     for base, a, b in rounds]
            cpu = [a.busy_cpu_ms - b.busy_cpu_ms for _, a, b in rounds
                   if a.busy_cpu_ms is not None and b.busy_cpu_ms is not None]
            lines.append(f"- {rate:g} req/s{_over(rounds)}: telemetry on minus off: +E2E p50 "
                         f"{spread([d[0] for d in diffs])} ms, +TTFT p50 "
                         f"{spread([d[2] for d in diffs])} ms, +E2E p99 "
                         f"{spread([d[1] for d in diffs])} ms, busy CPU/req "
                         f"{spread(cpu) if cpu else _f(None)} ms (budget: 15% of 2 ms p50 = "
                         "0.30 ms)")
    return lines


def _over(rounds: Sequence[object]) -> str:
    return f", {len(rounds)} rounds" if len(rounds) > 1 else ""


def caveat(meta: dict[str, str]) -> list[str]:
    """A warning when other jobs loaded the machine beyond its cores during the run."""
    loads = [float(x) for x in (meta["load_before"] + " " + meta["load_after"]).split()]
    cpus = int(meta["machine"].split()[0])
    if max(loads) <= cpus:
        return []
    return ["## Reading these numbers", "",
            f"The load average reached {max(loads):.1f} on {cpus} CPUs during this run (other "
            "engineers' jobs). The gateways, the simulator and the load generator competed with "
            "them for CPU, so: absolute latencies are inflated; differences of a few ms at p50 "
            "and of tens of ms at p99 between two slorouter configurations are within run-to-run "
            "noise (telemetry on minus off changes sign from rate to rate); CPU ms/req at low "
            "rates is dominated by the process's fixed background work spread over few "
            "requests. Rerun on a quiet machine before quoting a number.", ""]


def _rounds_note(rounds: int) -> list[str]:
    if rounds <= 1:
        return []
    return [f"- Rounds: {rounds}. At each rate every target is measured once per round, in an "
            "order rotated from round to round, so that a slow minute of the machine does not "
            "fall on one target only. The tables show each figure's median over the rounds "
            "(requests and errors summed); the comparisons show the median [lowest–highest] of "
            "the ratios taken within each round; a rate is sustained when every round was."]


def telemetry_section(rows: list[tuple[str, float]]) -> list[str]:
    return ["## Telemetry CPU cost (in-process)", "",
            "`python -m bench.suite telemetry-cost`, run right after the sweep: CPU time the "
            "telemetry sink spends per request outcome (a streamed request with one retry: "
            "8 spans, 14 metric records), OTLP protobuf encoding included (in the batches the "
            "service exports, `SPAN_EXPORT_BATCH`), sending excluded. Budget: 15% of the "
            "1.5 ms CPU-per-request target = 225 µs.", "",
            "| configuration | CPU µs per request |", "|---|---:|",
            *[f"| {label} | {value:.0f} |" for label, value in rows], ""]


def render(targets: list[Running], rates: list[float], modes: list[bool], meta: dict[str, str],
           command: str, extra: list[str] | None = None) -> str:
    out = ["# Benchmarks: slorouter side by side with LiteLLM proxy", "",
           "Generated by `bench/vs_litellm.py` (do not edit by hand; rerun the command below).", "",
           f"- Date: {meta['date']}", f"- Machine: {meta['machine']}",
           f"- Load average (1/5/15 min) before: {meta['load_before']}; after: "
           f"{meta['load_after']}. Other engineers' jobs share these cores: numbers taken under "
           "load are noisy, compare targets within one run only.",
           "- Upstream: the provider simulator, model `bench`: first token after 20 ms, 16 output "
           "tokens (4 per chunk), so the direct row is the floor and every difference is the "
           "gateway's. Prompt: one short English sentence, `max_tokens` 16, temperature 0.7.",
           f"- Load: open-loop Poisson arrivals, the same seeded schedule for every target, "
           f"{meta['duration']} s per point at least and at least "
           f"{meta.get('min_requests', '0')} requests (so p99 is not the maximum), after a 2 s "
           f"warm-up; a target is not run at higher rates once it misses p99 E2E < "
           f"{SLO_P99_MS:g} ms or has errors, or once the load generator falls behind its "
           f"schedule (dispatch lag p99 over {LAG_BOUND_MS:g} ms: that rate was not offered).",
           f"- Placement: {meta.get('placement') or 'all processes share every core'}.",
           *_rounds_note(int(meta.get("rounds", "1"))),
           "- CPU ms/req: time on CPU of every thread of the gateway's process group, exited "
           "threads included (each process's CPU-time clock, ns) over the measured window "
           "divided by requests sent. "
           f"busy CPU ms/req: the same less the gateway's idle CPU (measured over "
           f"{IDLE_WINDOW_S:g} s with no requests: timers, exporters) for the window's length, "
           "i.e. what requests cost. RSS: "
           "the group's resident memory at the end of the point.",
           "- Targets: `direct` (the simulator itself), `slorouter-minimal` "
           "(`bench/configs/slorouter-minimal.yaml`: one pinned model, no auth, no cache), "
           "`slorouter-full` (`bench/configs/slorouter-full.yaml`: API-key auth, `auto` → "
           "classification → policy decision, disk cache lookup, plus telemetry from "
           "`bench/configs/telemetry.json`: metrics, `/metrics`, OTLP export of metrics every "
           "15 s (the default) and of 10% of traces to a local receiver), "
           "`slorouter-full-no-telemetry` (the same without "
           "telemetry), `litellm` (LiteLLM proxy 1.110.2, `bench/configs/litellm-proxy.yaml`, "
           "master key auth, default settings, uvicorn access log off like slorouter's).", ""]
    for stream in modes:
        title = "streaming" if stream else "non-streaming"
        out += [f"## {title.capitalize()}", "", "Latency (ms) and cost per point:", "",
                *latency_table(targets, rates, stream), "",
                "Added latency against `direct` at the same rate (ms; `sustained`: p99 E2E "
                f"under {SLO_P99_MS:g} ms, no errors, the load generator on schedule):", "",
                *overhead_table(targets, rates, stream), "",
                f"Max sustainable rate (p99 E2E < {SLO_P99_MS:g} ms, no errors, the load "
                "generator on schedule; highest rate tried that passed): "
                + ", ".join(f"{r.target.name} {_f(max_rate(r, stream), 0)}"
                            for r in targets if r.target.kind != "direct"), "",
                "Comparisons:", "", *(comparisons(targets, rates, stream) or ["- none"]), ""]
    out += caveat(meta)
    out += extra if extra is not None else []
    out += ["## Commands", "", "```", command,
            "# the default open-loop mix against one target (under 5 minutes on 2 cores):",
            "python -m bench.suite",
            "# telemetry's CPU per request, in-process:",
            "python -m bench.suite telemetry-cost", "```", "",
            "The other benchmarks (router overhead, classification, event-loop stalls, scoring, "
            "cache hits, prefix affinity, faults, replay) and their latest figures are in "
            "[measurements.md](measurements.md).", ""]
    return "\n".join(out)
