"""Measure the simulator's own CPU cost per request (Linux: reads /proc/PID/stat).

    python -m router.providers.simulator.cpu_bench [--requests 6000] [--concurrency 8] [--stream]

Starts `slorouter sim` on a free port with one zero-latency model (`presets.instant`, 16 output
tokens), sends keep-alive requests from this process with aiohttp, and prints requests per
second and the server's user+system CPU time per request. It is a yardstick for the claim that
the simulator is cheap enough to be the baseline of overhead benchmarks; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

from router.providers.simulator import presets

WARMUP_REQUESTS = 400


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    profile = presets.write_profile_file(directory / "p.json", {"instant": presets.instant()})
    port = _free_port()
    argv = [sys.executable, "-m", "router.cli", "sim", "--port", str(port), "--profile",
            str(profile)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=0.5).close()
            return process, url
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the simulator did not start")


async def _drive(url: str, total: int, concurrency: int, stream: bool) -> None:
    body = {"model": "instant", "stream": stream,
            "messages": [{"role": "user", "content": "hello there, how are you today?"}]}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(count: int) -> None:
            for _ in range(count):
                async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                    await response.read()

        await asyncio.gather(*(worker(total // concurrency) for _ in range(concurrency)))


def measure(total: int, concurrency: int, stream: bool) -> tuple[float, float]:
    """(requests per second, server CPU ms per request) over `total` requests."""
    with tempfile.TemporaryDirectory() as directory:
        process, url = _start(Path(directory))
        try:
            asyncio.run(_drive(url, WARMUP_REQUESTS, concurrency, stream))
            cpu_before, started = process_cpu_s(process.pid), time.perf_counter()
            asyncio.run(_drive(url, total, concurrency, stream))
            elapsed = time.perf_counter() - started
            cpu_ms = (process_cpu_s(process.pid) - cpu_before) * 1000 / total
        finally:
            process.terminate()
            process.wait(timeout=10)
    return total / elapsed, cpu_ms


def main() -> int:
    parser = argparse.ArgumentParser(description="simulator CPU per request")
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    rate, cpu_ms = measure(args.requests, args.concurrency, args.stream)
    kind = "streaming (16 chunks)" if args.stream else "non-streaming"
    print(f"{kind}: {rate:.0f} req/s closed loop, server CPU {cpu_ms:.3f} ms/request")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
