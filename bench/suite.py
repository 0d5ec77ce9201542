"""The benchmark suite: the default workload mix through slorouter, and telemetry's CPU cost.

    python -m bench.suite [--rate 20] [--duration 60] [--config bench/configs/slorouter-suite.yaml]
                          [--direct] [--out bench/out/suite]
    python -m bench.suite telemetry-cost [--requests 3000]

The first form starts the provider simulator (`bench/configs/sim_profile.json`) and slorouter
(`--config`; `--direct` skips it and loads the simulator itself), runs the default mix
(`bench/workloads/default.json`) open-loop, and prints the same report as `slorouter bench`
(under 5 minutes on 2 cores with the defaults). The second measures, in this process, the CPU
time `TelemetrySink` spends per request outcome: metrics only, and metrics plus traces (OTLP
protobuf encoding included) at sampling ratios 1.0 and 0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from router.cli_types import positive_int, positive_number, seed_number
from router.loadtest.loadgen import plan_run, run_plan
from router.loadtest.outputs import exit_code, prepare_out, write_outputs
from router.loadtest.progress import Progress
from router.loadtest.stats import format_summary, summarize
from router.loadtest.workload import load_workload
from tests.support.procs import PYTHON, ManagedProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "bench" / "configs"


def start(work: Path, config: Path | None, sim_profile: Path | None = CONFIGS / "sim_profile.json"
          ) -> tuple[list[ManagedProcess], str]:
    """The simulator (`sim_profile`'s models, or its built-in ones for None) and, unless `config`
    is None, slorouter on it, working in `work` (its disk cache there too); the processes and
    the base URL to load (the router's, else the simulator's). The config names the simulator
    as `${SIM_BASE}` or, as the embedded default does, `${SLOROUTER_SIM_BASE}`."""
    sim_port = free_port()
    profile = ["--profile", str(sim_profile)] if sim_profile is not None else []
    sim = ManagedProcess([PYTHON, "-m", "router.cli", "sim", "--port", str(sim_port), *profile],
                         sim_port, ready_url=f"http://127.0.0.1:{sim_port}/v1/models",
                         log_path=work / "sim.log").start()
    sim_base = f"http://127.0.0.1:{sim_port}"
    if config is None:
        return [sim], sim_base
    port = free_port()
    env = {"SIM_BASE": sim_base, "SLOROUTER_SIM_BASE": sim_base, "SLOROUTER_SIM_KEY": "bench",
           "BENCH_CACHE_DIR": str(work / "cache")}
    argv = [PYTHON, "-m", "router.cli", "serve", "--config", str(config.resolve()), "--port",
            str(port), "--log-level", "warning"]
    try:
        router = ManagedProcess(argv, port,
                                ready_url=f"http://127.0.0.1:{port}/healthz", env=env,
                                log_path=work / "router.log", startup_timeout_s=120,
                                cwd=work).start()
    except BaseException:  # a router that cannot start leaves no simulator behind
        sim.stop()
        raise
    return [sim, router], f"http://127.0.0.1:{port}"


async def run_mix(args: argparse.Namespace) -> int:
    """As `slorouter bench`: 0 when every request succeeded, 1 otherwise, 2 on bad input, 130
    when interrupted (Ctrl-C: the answers so far are summarised, as `slorouter bench` does)."""
    try:
        workload = load_workload(args.workload)
        plan = plan_run(workload, args.rate, args.duration, args.seed)
    except (OSError, ValueError) as exc:
        print(f"bench.suite: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        try:
            procs, base = start(Path(tmp), None if args.direct else args.config)
        except RuntimeError as exc:  # the router's own words are in its log's last lines
            print(f"bench.suite: {exc}", file=sys.stderr)
            return 2
        try:
            try:  # once what it measures has started: a run refused before leaves nothing
                prepare_out(args.out)
            except OSError as exc:
                print(f"bench.suite: {exc}", file=sys.stderr)
                return 2
            bar = None if args.no_progress else Progress(
                len(plan), f"{workload.mix.name}@{args.rate:g}/s")
            started = time.perf_counter()
            result = await run_plan("direct" if args.direct else "slorouter",
                                    f"{base}/v1/chat/completions", plan, args.rate,
                                    args.duration, args.seed,
                                    progress=bar.update if bar else None)
            if bar is not None:
                bar.close()
        finally:
            for proc in reversed(procs):
                proc.stop()
    summary = summarize(result)
    write_outputs(result, summary, args.out, ttft_histogram=True)
    print(format_summary(summary))
    print(f"load run {time.perf_counter() - started:.0f} s"
          f"{' (interrupted)' if result.interrupted else ''}; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; plots in {args.out}")
    return exit_code(result, summary)


def telemetry_cost(requests: int) -> list[tuple[str, float]]:
    """CPU µs per outcome spent by the telemetry sink, in this process (`process_time`).

    Spans are encoded to OTLP protobuf in batches of `SPAN_EXPORT_BATCH`, as the service's
    `BatchSpanProcessor` exports them; sending them over HTTP is not counted.
    """
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from router.telemetry.settings import TelemetrySettings
    from router.telemetry.setup import SPAN_EXPORT_BATCH, build_telemetry
    from tests.telemetry.helpers import DEPLOYMENTS, streamed_with_retry

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {requests} outcomes "
          "(a streamed request with one retry: 8 spans, 14 metric records)")
    rows = []
    for label, ratio, traced in (("metrics only", 0.0, False),
                                 ("metrics + traces, ratio 0.1", 0.1, True),
                                 ("metrics + traces, ratio 1.0", 1.0, True)):
        exporter = InMemorySpanExporter()
        processor = SimpleSpanProcessor(exporter) if traced else None
        telemetry = build_telemetry(TelemetrySettings(sample_ratio=ratio), DEPLOYMENTS,
                                    span_processor=processor)
        outcomes = [streamed_with_retry()[0] for _ in range(requests)]
        for outcome in outcomes:
            outcome.trace = None  # roots sampled by ratio, as for requests without traceparent
        began = time.process_time()
        for outcome in outcomes:
            telemetry.sink.record(outcome)
        telemetry.sink.flush()  # inside an event loop, record() only queues
        spans = exporter.get_finished_spans()
        for start in range(0, len(spans), SPAN_EXPORT_BATCH):  # as the exporter encodes them
            encode_spans(spans[start:start + SPAN_EXPORT_BATCH]).SerializeToString()
        spent = (time.process_time() - began) / requests * 1e6
        print(f"  {label:<30}{spent:8.1f} µs CPU per request")
        rows.append((label, spent))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="mode")
    cost = sub.add_parser("telemetry-cost", help="CPU per outcome of the telemetry sink")
    cost.add_argument("--requests", type=positive_int, default=3000)
    parser.add_argument("--rate", type=positive_number, default=20.0)
    parser.add_argument("--duration", type=positive_number, default=60.0)
    parser.add_argument("--seed", type=seed_number, default=7)
    parser.add_argument("--workload", type=Path,
                        default=ROOT / "bench" / "workloads" / "default.json")
    parser.add_argument("--config", type=Path, default=CONFIGS / "slorouter-suite.yaml")
    parser.add_argument("--direct", action="store_true", help="load the simulator directly")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "suite")
    parser.add_argument("--no-progress", action="store_true",
                        help="do not print progress while the load runs")
    args = parser.parse_args()
    if args.mode == "telemetry-cost":
        telemetry_cost(args.requests)
        return
    raise SystemExit(asyncio.run(run_mix(args)))


if __name__ == "__main__":
    main()
