"""What a request costs the machine, apart from what slorouter adds: the stack's floor beside it.

    python -m bench.stack_floor [--rates 5,200] [--duration 20] [--idle 10]

Starts the provider simulator (the `bench.overhead` profile: 20 ms to the first token), slorouter
pinned to it through the pass-through adapter (`bench.overhead`'s config), and
`bench/floor_proxy.py`: the same server and HTTP client with nothing between them. Measures each
gateway's CPU per second with no requests (`--idle` s: timers, housekeeping), then runs the same
open-loop Poisson load against direct, floor and slorouter at each rate, printing added E2E
latency against direct, CPU per request, and busy CPU per request (less the idle CPU).

Why: on a 2-core VM a request costs several times more CPU at 5 req/s than at 200 req/s, for any
gateway (an idle vCPU is woken, caches are cold). Read slorouter's figures against the floor's
at the same rate: the floor shows what no code change in the router can remove.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from bench.loadgen import RunResult
from bench.overhead import added_ms, measure, start_processes
from bench.procstat import busy_cpu_ms, idle_cpu_per_s, place_apart
from tests.support.procs import PYTHON, ManagedProcess, free_port

ROOT = Path(__file__).resolve().parents[1]


def start_floor(sim_base: str, workdir: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = ManagedProcess([PYTHON, "-m", "uvicorn", "bench.floor_proxy:app", "--port", str(port),
                           "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                           "--log-level", "warning"], port,
                          ready_url=f"http://127.0.0.1:{port}/",
                          env={"FLOOR_UPSTREAM": sim_base, "PYTHONPATH": str(ROOT)},
                          log_path=workdir / "floor.log").start()
    return proc, f"http://127.0.0.1:{port}"


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sim, router, sim_base, router_base = start_processes(Path(tmp))
        floor, floor_base = start_floor(sim_base, Path(tmp))
        try:
            print(place_apart([os.getpid(), sim.pid], [router.pid, floor.pid]), flush=True)
            # warm both before the idle reading, as they will be when measured
            for name, url, model in (("floor", floor_base, "bench"),
                                      ("slorouter", router_base, "passthrough")):
                await measure(name, f"{url}/v1/chat/completions", model, 20, 2, False, None)
            idle = dict(zip(("floor", "slorouter"),
                            await idle_cpu_per_s([floor.pid, router.pid], args.idle), strict=True))
            print("idle CPU ms per s: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in idle.items()))
            print(f"{'rate':>6} {'target':<10}{'sent':>6}{'err':>5}{'+E2E p50':>10}{'+p99':>8}"
                  f"{'cpu ms/req':>12}{'busy ms/req':>13}")
            for rate in args.rates:
                base, _ = await measure("direct", f"{sim_base}/v1/chat/completions", "bench",
                                        rate, max(args.duration, 200 / rate), False, None)
                for name, url, model, pid in (
                        ("floor", floor_base, "bench", floor.pid),
                        ("slorouter", router_base, "passthrough", router.pid)):
                    result, cpu = await measure(name, f"{url}/v1/chat/completions", model, rate,
                                                max(args.duration, 200 / rate), False, pid)
                    print_row(rate, result, base, cpu, idle[name])
        finally:
            floor.stop()
            router.stop()
            sim.stop()


def print_row(rate: float, result: RunResult, base: RunResult, cpu_ms: float | None,
              idle_s_per_s: float) -> None:
    p50, p99 = added_ms(result, base)
    cpu = float("nan") if cpu_ms is None else cpu_ms
    busy = busy_cpu_ms(cpu, idle_s_per_s, result.duration_s, len(result.samples))
    print(f"{rate:>6g} {result.target:<10}{len(result.samples):>6}{result.errors():>5}"
          f"{p50:>10.2f}{p99:>8.2f}{cpu:>12.2f}{busy:>13.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")],
                        default=[5.0, 200.0], help="comma-separated req/s (default: 5,200)")
    parser.add_argument("--duration", type=float, default=20.0,
                        help="seconds per point, at least 200 requests (default: 20)")
    parser.add_argument("--idle", type=float, default=10.0,
                        help="seconds of idle CPU measurement (default: 10)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
