"""What a request costs the machine, apart from what slorouter adds: the stack's floor beside it.

    python -m bench.stack_floor [--rates 5,200] [--duration 20] [--idle 10] [--stream]

Starts the provider simulator (the `bench.overhead` profile: 20 ms to the first token), slorouter
pinned to it through the pass-through adapter (`bench.overhead`'s config),
`bench/floor_proxy.py` (the same server and HTTP client with nothing between them) and, when it
is installed (`apt-get install nginx-light`), nginx as a bare reverse proxy
(`bench/configs/nginx-floor.conf`: one process, keep-alive upstream, no access log), the
yardstick issue 8 names. Measures each gateway's CPU per second with no requests (`--idle` s:
timers, housekeeping), then runs the same open-loop Poisson load against direct and each gateway
at each rate, printing added E2E latency against direct, CPU per request, and busy CPU per
request (less the idle CPU). `--stream` asks for streamed answers (each gateway relays the
simulator's chunks as they arrive).

Why: on a 2-core VM a request costs several times more CPU at 5 req/s than at 200 req/s, for any
gateway (an idle vCPU is woken, caches are cold). Read slorouter's figures against the floor's
at the same rate: the floor shows what no code change in the router can remove, and nginx what
a proxy written in C costs on the same machine at the same rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.loadgen import RunResult
from bench.overhead import added_ms, measure, start_processes
from bench.procstat import busy_cpu_ms, idle_cpu_per_s, place_apart
from bench.vs_litellm import substitute
from tests.support.procs import PYTHON, ManagedProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
NGINX_CONFIG = ROOT / "bench" / "configs" / "nginx-floor.conf"


@dataclass
class Gateway:
    name: str
    proc: ManagedProcess
    base: str
    model: str

    @property
    def url(self) -> str:
        return f"{self.base}/v1/chat/completions"


def start_floor(sim_base: str, workdir: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    proc = ManagedProcess([PYTHON, "-m", "uvicorn", "bench.floor_proxy:app", "--port", str(port),
                           "--loop", "uvloop", "--http", "httptools", "--no-access-log",
                           "--log-level", "warning"], port,
                          ready_url=f"http://127.0.0.1:{port}/",
                          env={"FLOOR_UPSTREAM": sim_base, "PYTHONPATH": str(ROOT)},
                          log_path=workdir / "floor.log").start()
    return proc, f"http://127.0.0.1:{port}"


def start_nginx(sim_base: str, workdir: Path) -> tuple[ManagedProcess, str] | None:
    """nginx relaying to the simulator, or None when nginx is not installed."""
    binary = shutil.which("nginx") or next(
        (path for path in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(path, os.X_OK)),
        None)
    if binary is None:
        return None
    port = free_port()
    config = workdir / "nginx.conf"
    config.write_text(substitute(NGINX_CONFIG.read_text(), {
        "WORK": str(workdir), "PORT": str(port), "UPSTREAM": sim_base.removeprefix("http://")}))
    proc = ManagedProcess([binary, "-c", str(config), "-e", str(workdir / "nginx-error.log")],
                          port, ready_url=f"http://127.0.0.1:{port}/v1/models",
                          log_path=workdir / "nginx.log").start()
    return proc, f"http://127.0.0.1:{port}"


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        sim, router, sim_base, router_base = start_processes(Path(tmp))
        gateways = [Gateway("floor", *start_floor(sim_base, Path(tmp)), "bench")]
        nginx = start_nginx(sim_base, Path(tmp))
        if nginx is None:
            print("nginx: not installed (apt-get install nginx-light), not measured")
        else:
            gateways.append(Gateway("nginx", *nginx, "bench"))
        gateways.append(Gateway("slorouter", router, router_base, "passthrough"))
        try:
            print(place_apart([os.getpid(), sim.pid], [g.proc.pid for g in gateways]), flush=True)
            # warm each before the idle reading, as they will be when measured
            for g in gateways:
                await measure(g.name, g.url, g.model, 20, 2, args.stream, None)
            idle = dict(zip((g.name for g in gateways),
                            await idle_cpu_per_s([g.proc.pid for g in gateways], args.idle),
                            strict=True))
            print("idle CPU ms per s: " + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in idle.items()))
            print(f"{'rate':>6} {'target':<10}{'sent':>6}{'err':>5}{'+E2E p50':>10}{'+p99':>8}"
                  f"{'cpu ms/req':>12}{'busy ms/req':>13}")
            for rate in args.rates:
                base, _ = await measure("direct", f"{sim_base}/v1/chat/completions", "bench",
                                        rate, max(args.duration, 200 / rate), args.stream, None)
                for g in gateways:
                    result, cpu = await measure(g.name, g.url, g.model, rate,
                                                max(args.duration, 200 / rate), args.stream,
                                                g.proc.pid)
                    print_row(rate, result, base, cpu, idle[g.name])
        finally:
            for g in gateways:
                g.proc.stop()
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
    parser.add_argument("--stream", action="store_true",
                        help="streamed answers instead of whole ones")
    parser.add_argument("--idle", type=float, default=10.0,
                        help="seconds of idle CPU measurement (default: 10)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
