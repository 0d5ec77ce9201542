"""Router overhead: the same open-loop load against the simulator directly and through slorouter.

    python -m bench.overhead [--rates 50,200] [--duration 20] [--repeat 3] [--stream]
                             [--adapters passthrough,litellm] [--placement apart,shared]

Starts one simulator (a model with a fixed 20 ms first-token time, so every difference is the
router's) and one slorouter process pinned to it through each adapter, then runs the same
Poisson schedule against each target in turn and prints p50/p99 of E2E and TTFT, the overhead
against the direct baseline, and the router's CPU time per request. Each point is measured
`--repeat` times (direct, then each adapter, with a new Poisson seed each time) and summarised
by the median and the worst overhead over the repeats: on a shared VM one 20 s run's p99 moves
by several milliseconds from run to run.

Placement (`bench/procstat.py`): `apart` runs the load generator and the simulator on one core
and slorouter on the other (the direct baseline with the same pinning), so the figures are the
router's and not the scheduler's; `shared` lets all three processes share both cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

from bench.loadgen import RunResult, run_open_loop
from bench.procstat import place_apart, process_cpu_s, share_all
from tests.support.procs import PYTHON, ManagedProcess, free_port

SIM_PROFILE = {"models": {"bench": {
    "ttft_p50_ms": 20, "ttft_p99_ms": 20, "tpot_p50_ms": 0.2, "tpot_p99_ms": 0.2,
    "output_tokens_p50": 16, "output_tokens_p99": 16, "tokens_per_chunk": 4}}}
ROUTER_CONFIG = """version: 1
deployments:
  - name: passthrough
    model: openai/bench
    adapter: openai_passthrough
    api_base: {base}/v1
    input_price_per_mtok: 1
    output_price_per_mtok: 2
  - name: litellm
    model: openai/bench
    adapter: litellm
    api_base: {base}/v1
    api_key: env:SIM_KEY
    input_price_per_mtok: 1
    output_price_per_mtok: 2
models:
  - name: passthrough
    deployments: [passthrough]
  - name: litellm
    deployments: [litellm]
routes:
  default_model: passthrough
server:
  cache:
    directory: {cache}
"""
PAYLOAD = {"messages": [{"role": "user", "content": "Summarise the plot of Hamlet briefly."}],
           "max_tokens": 16}


def start_processes(workdir: Path) -> tuple[ManagedProcess, ManagedProcess, str, str]:
    profile = workdir / "profile.json"
    profile.write_text(json.dumps(SIM_PROFILE))
    sim_port, router_port = free_port(), free_port()
    sim = ManagedProcess([PYTHON, "-m", "router.cli", "sim", "--port", str(sim_port),
                          "--profile", str(profile)], sim_port,
                         ready_url=f"http://127.0.0.1:{sim_port}/v1/models",
                         log_path=workdir / "sim.log").start()
    sim_base = f"http://127.0.0.1:{sim_port}"
    config = workdir / "router.yaml"
    config.write_text(ROUTER_CONFIG.format(base=sim_base, cache=workdir / "cache"))
    router = ManagedProcess([PYTHON, "-m", "router.cli", "serve", "--config", str(config),
                             "--port", str(router_port), "--log-level", "warning"],
                            router_port, ready_url=f"http://127.0.0.1:{router_port}/healthz",
                            env={"SIM_KEY": "bench"}, log_path=workdir / "router.log",
                            startup_timeout_s=60).start()
    return sim, router, sim_base, f"http://127.0.0.1:{router_port}"


async def measure(name: str, url: str, model: str, rate: float, duration: float,
                  stream: bool, cpu_pid: int | None, seed: int = 42
                  ) -> tuple[RunResult, float | None]:
    payload = {**PAYLOAD, "model": model, "stream": stream}
    await run_open_loop(name, url, payload, rate=min(rate, 50), duration_s=2, seed=1)  # warm-up
    cpu_before = process_cpu_s(cpu_pid) if cpu_pid else None
    result = await run_open_loop(name, url, payload, rate=rate, duration_s=duration, seed=seed)
    cpu_ms = None
    if cpu_pid and cpu_before is not None:
        cpu_ms = (process_cpu_s(cpu_pid) - cpu_before) * 1e3 / max(1, len(result.samples))
    return result, cpu_ms


Rows = list[tuple[RunResult, float | None]]


def added_ms(result: RunResult, base: RunResult) -> tuple[float, float]:
    """Overhead of `result` against the direct baseline `base`: +E2E p50 and +E2E p99 (ms)."""
    e2e, base_e2e = result.percentiles_ms("e2e_s"), base.percentiles_ms("e2e_s")
    return e2e[0] - base_e2e[0], e2e[1] - base_e2e[1]


def report(rate: float, rows: Rows, placement: str, label: str = "") -> None:
    base = rows[0][0]
    base_e2e, base_ttft = base.percentiles_ms("e2e_s"), base.percentiles_ms("ttft_s")
    print(f"\nrate {rate:g} req/s, {base.duration_s:g} s per target{label}; {placement}")
    print(f"{'target':<22}{'sent':>6}{'err':>5}{'E2E p50':>9}{'p99':>8}{'TTFT p50':>10}"
          f"{'p99':>8}{'+E2E p50':>10}{'+p99':>8}{'+TTFT p50':>11}{'+p99':>8}{'cpu ms/req':>12}")
    for result, cpu_ms in rows:
        e2e, ttft = result.percentiles_ms("e2e_s"), result.percentiles_ms("ttft_s")
        cpu = f"{cpu_ms:.2f}" if cpu_ms is not None else "-"
        print(f"{result.target:<22}{len(result.samples):>6}{result.errors():>5}"
              f"{e2e[0]:>9.2f}{e2e[1]:>8.2f}{ttft[0]:>10.2f}{ttft[1]:>8.2f}"
              f"{e2e[0] - base_e2e[0]:>10.2f}{e2e[1] - base_e2e[1]:>8.2f}"
              f"{ttft[0] - base_ttft[0]:>11.2f}{ttft[1] - base_ttft[1]:>8.2f}{cpu:>12}")


def summarize(rate: float, repeats: list[Rows]) -> None:
    """Median and worst overhead (and median CPU) of each gateway over the repeats."""
    print(f"\nrate {rate:g} req/s over {len(repeats)} repeats: added E2E (ms), median [worst]")
    for column in range(1, len(repeats[0])):
        added = [added_ms(rows[column][0], rows[0][0]) for rows in repeats]
        p50s, p99s = sorted(a[0] for a in added), sorted(a[1] for a in added)
        cpus = sorted(c for rows in repeats if (c := rows[column][1]) is not None)
        cpu = f"{cpus[len(cpus) // 2]:.2f}" if cpus else "-"
        print(f"  {repeats[0][column][0].target:<22} +p50 {p50s[len(p50s) // 2]:6.2f} "
              f"[{p50s[-1]:6.2f}]  +p99 {p99s[len(p99s) // 2]:6.2f} [{p99s[-1]:6.2f}]  "
              f"cpu ms/req {cpu}")


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sim, router, sim_base, router_base = start_processes(Path(tmp))
        try:
            for placement in args.placement:
                where = (place_apart([os.getpid(), sim.pid], [router.pid])
                         if placement == "apart" else share_all([os.getpid(), sim.pid, router.pid]))
                for rate in args.rates:
                    repeats = []
                    for i in range(args.repeat):
                        seed = 42 + i
                        rows = [await measure("direct (simulator)",
                                              f"{sim_base}/v1/chat/completions", "bench", rate,
                                              args.duration, args.stream, None, seed)]
                        for adapter in args.adapters:
                            rows.append(await measure(
                                f"slorouter {adapter}", f"{router_base}/v1/chat/completions",
                                adapter, rate, args.duration, args.stream, router.pid, seed))
                        report(rate, rows, where, f", repeat {i + 1}/{args.repeat}")
                        repeats.append(rows)
                    summarize(rate, repeats)
        finally:
            router.stop()
            sim.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")],
                        default=[50.0, 200.0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=3,
                        help="measure each point this many times (new seed each time)")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--adapters", type=lambda s: s.split(","),
                        default=["passthrough", "litellm"])
    parser.add_argument("--placement", type=lambda s: s.split(","), default=["apart", "shared"],
                        help="apart: slorouter on its own core; shared: all on every core")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
