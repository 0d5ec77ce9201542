"""Start-up time and memory of each gateway, side by side: what a replica costs to bring up.

    python -m bench.startup [--requests 50] [--repeat 3] [--no-litellm]
                            [--litellm-requirements bench/litellm-proxy-requirements.txt]

Starts the provider simulator, then each target in turn: slorouter with the minimal and the
full benchmark configs (`bench/configs/`, as `bench.vs_litellm` runs them) and, as the baseline,
LiteLLM proxy from `bench/.venv-litellm` (created on first use, as `bench.vs_litellm` does).
For each it prints the time from process start to the first successful health check, and the
resident memory of its process group after `--requests` sequential chat completions (so what
the first requests load is counted). The median over `--repeat` starts is printed last.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.procstat import group_rss_mb
from bench.vs_litellm import (
    CONFIGS,
    TARGETS,
    add_litellm_args,
    ensure_litellm,
    start_otlp_sink,
    start_target,
)
from tests.support.procs import PYTHON, ManagedProcess, free_port


def _measure(name: str, work: Path, sim_base: str, env: dict[str, str],
             litellm_bin: Path | None, requests: int) -> tuple[float, float]:
    started = time.monotonic()
    running = start_target(TARGETS[name], work, sim_base, env, litellm_bin)
    ready_s = time.monotonic() - started
    assert running.proc is not None
    try:
        headers = {"authorization": f"Bearer {running.api_key}"} if running.api_key else {}
        body = {"model": running.target.model, "max_tokens": 16,
                "messages": [{"role": "user", "content": "Summarise the plot of Hamlet."}]}
        for _ in range(requests):
            httpx.post(running.url, json=body, headers=headers, timeout=30).raise_for_status()
        return ready_s, group_rss_mb(running.proc.pid)
    finally:
        running.proc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50,
                        help="chat completions sent before memory is read (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="starts per target; the median is printed (default: %(default)s)")
    parser.add_argument("--no-litellm", action="store_true", help="skip the LiteLLM baseline")
    add_litellm_args(parser)
    args = parser.parse_args(argv)
    names = ["slorouter-minimal", "slorouter-full"]
    litellm_bin = None
    if not args.no_litellm:
        litellm_bin = ensure_litellm(args.litellm_venv, args.litellm_requirements)
        names.append("litellm")
    sink, otlp = start_otlp_sink()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "profile.json").write_text((CONFIGS / "sim_profile.json").read_text())
        port = free_port()
        sim = ManagedProcess([PYTHON, "-m", "router.cli", "sim", "--port", str(port),
                              "--profile", str(work / "profile.json")], port,
                             ready_url=f"http://127.0.0.1:{port}/v1/models").start()
        env = {"SIM_BASE": f"http://127.0.0.1:{port}", "BENCH_CACHE_DIR": str(work / "cache"),
               "BENCH_TENANT_KEY": "sk-bench-" + secrets.token_urlsafe(24),
               "LITELLM_MASTER_KEY": "sk-litellm-" + secrets.token_urlsafe(24),
               "OTLP_ENDPOINT": otlp}
        try:
            print(f"{'target':<20} {'run':>3} {'ready s':>8} {'RSS MB':>8}")
            for run in range(1, args.repeat + 1):
                for name in names:  # alternating, so a slow spell of the machine hits all
                    ready_s, rss = _measure(name, work, env["SIM_BASE"], env, litellm_bin,
                                            args.requests)
                    results[name].append((ready_s, rss))
                    print(f"{name:<20} {run:>3} {ready_s:>8.2f} {rss:>8.0f}", flush=True)
        finally:
            sim.stop()
            sink.shutdown()
    print(f"\nmedian over {args.repeat} starts, RSS after {args.requests} requests:")
    for name, rows in results.items():
        print(f"  {name:<20} ready {statistics.median(r[0] for r in rows):6.2f} s   "
              f"RSS {statistics.median(r[1] for r in rows):6.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
