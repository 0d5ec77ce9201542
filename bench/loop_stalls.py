"""Event-loop responsiveness while classifying long prompts.

    python -m bench.loop_stalls [--rate 20] [--duration 15] [--tokens 4000]

Starts the simulator and slorouter, sends `auto` requests whose prompts are about `--tokens`
tokens (so the classifier reads long text) at an open-loop rate, and meanwhile probes
`GET /healthz` every 10 ms. A stalled event loop delays the probes, so their latency (beside a
run with short prompts, in the same invocation) bounds the longest stall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from bench.loadgen import run_open_loop
from tests.support.procs import PYTHON, ManagedProcess, free_port

CONFIG = """version: 1
deployments:
  - {{name: d, model: openai/m, adapter: openai_passthrough, api_base: {base}/v1,
     input_price_per_mtok: 1, output_price_per_mtok: 1}}
models: [{{name: m, deployments: [d]}}]
routes: {{default_model: m}}
"""
PROFILE = {"models": {"m": {"ttft_p50_ms": 20, "ttft_p99_ms": 20, "output_tokens_p50": 8,
                            "output_tokens_p99": 8}}}
TEXT = ("The committee reviewed the quarterly figures, noted a rise in logistics costs, and "
        "asked the regional teams to explain the variance before the next meeting. ")


async def probe(url: str, stop: asyncio.Event) -> list[float]:
    delays = []
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            started = time.perf_counter()
            async with session.get(url) as response:
                await response.read()
            delays.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
    return delays


async def scenario(base: str, tokens: int, rate: float, duration: float) -> list[float]:
    prompt = (TEXT * (tokens * 4 // len(TEXT) + 1))[: tokens * 4]
    payload = {"model": "auto", "messages": [{"role": "user", "content": prompt}]}
    stop = asyncio.Event()
    prober = asyncio.create_task(probe(f"{base}/healthz", stop))
    await run_open_loop("load", f"{base}/v1/chat/completions", payload, rate, duration)
    stop.set()
    return await prober


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--tokens", type=int, default=4000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "p.json").write_text(json.dumps(PROFILE))
        sim_port, port = free_port(), free_port()
        sim = ManagedProcess([PYTHON, "-m", "router.cli", "sim", "--port", str(sim_port),
                              "--profile", str(work / "p.json")], sim_port).start()
        (work / "c.yaml").write_text(CONFIG.format(base=f"http://127.0.0.1:{sim_port}"))
        router = ManagedProcess([PYTHON, "-m", "router.cli", "serve", "--config",
                                 str(work / "c.yaml"), "--port", str(port), "--log-level",
                                 "warning"], port, ready_url=f"http://127.0.0.1:{port}/healthz",
                                startup_timeout_s=60).start()
        try:
            print(f"{'prompt tokens':>14}{'probes':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
            for tokens in (10, args.tokens):
                delays = asyncio.run(scenario(f"http://127.0.0.1:{port}", tokens, args.rate,
                                              args.duration))
                ms = np.array(delays) * 1e3
                print(f"{tokens:>14}{len(ms):>8}{np.percentile(ms, 50):>9.2f}"
                      f"{np.percentile(ms, 99):>9.2f}{ms.max():>9.2f}")
        finally:
            router.stop()
            sim.stop()


if __name__ == "__main__":
    main()
