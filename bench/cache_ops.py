"""Cache micro-benchmark: p50/p99 of the hit path, both backends side by side, in one run.

Measures key derivation, the cacheability decision, backend get/set (diskcache inline and in a
worker thread; Redis over loopback), the front's full lookup on a hit, and SSE replay. Each
operation runs `--n` times after a warm-up; times are per call, in microseconds.

    .venv/bin/python bench/cache_ops.py [--n 5000] [--body-bytes 2000] [--redis-url URL]

Without `--redis-url` a throw-away redis-server (no persistence) is started on a free port.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from cache.backends.disk import DiskResultCache
from cache.backends.redis import RedisResultCache, connect
from cache.entry import CachedEntry, EntryVersions
from cache.keys import CacheScope, derive_key
from cache.metrics import CacheMetrics
from cache.policy import CacheRule, decide
from cache.replay import replay_sse
from cache.result import ResultCache, ResultCacheFront

SCOPE = CacheScope(
    "acme",
    frozenset({"docs:read", "hr:read"}),
    "en-US",
    "pv-3f2a",
    frozenset({"gpt-4o-mini"}),
    "dv7",
)
REQUEST: dict[str, object] = {
    "model": "auto",
    "messages": [
        {"role": "system", "content": "You are the support assistant of Acme. " * 50},
        {"role": "user", "content": "How many days of leave do I have left this year?"},
    ],
    "temperature": 0,
    "max_tokens": 512,
    "stream": False,
}


def _body(size: int) -> bytes:
    text = ("Your remaining leave is listed in the HR portal. " * (size // 50 + 1))[:size]
    return orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 600, "completion_tokens": 400, "total_tokens": 1000},
        }
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: pass --redis-url or install redis-server")
    port, directory = _free_port(), tempfile.mkdtemp(prefix="bench-redis-")
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


async def _measure(op: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    """p50 and p99 in microseconds of `n` sequential awaits of `op` (after n/10 warm-up)."""
    for _ in range(max(n // 10, 10)):
        await op()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        await op()
        samples.append((time.perf_counter_ns() - start) / 1000)
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


def _sync(fn: Callable[[], object]) -> Callable[[], Awaitable[object]]:
    async def op() -> object:
        return fn()

    return op


async def _backend_rows(
    name: str, backend: ResultCache, entry: CachedEntry, n: int
) -> list[tuple[str, tuple[float, float]]]:
    key = derive_key(SCOPE, REQUEST)
    await backend.set(key, entry, 3600)
    metrics = CacheMetrics()
    front = ResultCacheFront(backend, metrics, clock=lambda: entry.created_at)
    decision = decide(REQUEST, CacheRule(ttl_s=3600), task="chat", risk="low")
    rows = [
        (f"{name} get (hit)", await _measure(lambda: backend.get(key), n)),
        (f"{name} set", await _measure(lambda: backend.set(key, entry, 3600), n)),
        (
            f"{name} front.lookup (hit)",
            await _measure(lambda: front.lookup(key, decision, SCOPE), n),
        ),
    ]
    assert metrics.snapshot().hits > 0 and not metrics.snapshot().backend_errors
    return rows


async def main_async(args: argparse.Namespace, redis_url: str) -> None:
    body = _body(args.body_bytes)
    entry = CachedEntry(body, EntryVersions.of(SCOPE, "gpt-4o-mini"), time.time(), 1.2)
    rule = CacheRule(ttl_s=3600)
    rows = [
        ("derive_key", await _measure(_sync(lambda: derive_key(SCOPE, REQUEST)), args.n)),
        (
            "decide",
            await _measure(_sync(lambda: decide(REQUEST, rule, task="chat", risk="low")), args.n),
        ),
        ("replay_sse", await _measure(_sync(lambda: replay_sse(body, include_usage=True)), args.n)),
    ]
    with tempfile.TemporaryDirectory(prefix="bench-disk-") as directory:
        metrics = CacheMetrics()
        inline = DiskResultCache(Path(directory), metrics, offload_get=False, offload_set=False)
        rows += await _backend_rows("disk inline", inline, entry, args.n)
        threaded = DiskResultCache(Path(directory), metrics, offload_get=True, offload_set=True)
        rows += await _backend_rows("disk to_thread", threaded, entry, args.n)
        inline.close()
        threaded.close()
    redis = RedisResultCache(connect(redis_url), CacheMetrics(), namespace="bench:")
    rows += await _backend_rows("redis", redis, entry, args.n)
    await redis.aclose()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"n={args.n} body={len(body)} B cpus={os.cpu_count()} load1={load:.2f}")
    print(f"{'operation':<34}{'p50 µs':>10}{'p99 µs':>10}")
    for name, (p50, p99) in rows:
        print(f"{name:<34}{p50:>10.1f}{p99:>10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--body-bytes", type=int, default=2000)
    parser.add_argument("--redis-url", default=None)
    args = parser.parse_args()
    if args.redis_url:
        asyncio.run(main_async(args, args.redis_url))
        return
    with _redis_server() as url:
        asyncio.run(main_async(args, url))


if __name__ == "__main__":
    main()
