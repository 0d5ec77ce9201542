"""Prefix-affinity routing vs round-robin over 3 simulated replicas of one model: TTFT.

Real processes on loopback: three `slorouter sim` processes, each one replica (one deployment)
of the same model with its own KV prefix cache, and one `slorouter serve` router. Each replica
models a self-hosted server: base TTFT ~100 ms plus prefill per prompt token, and on a prefix
hit the TTFT is multiplied by `prefix_cache_factor`. Its prefix cache is an LRU of
`--capacity` prefixes (the KV memory of one server), with a TTL longer than the run.

Workload: `--prompts` long system prompts (~1,000 tokens each), each request one of them
(seeded draw, the same sequence for every scenario) plus a question never sent before, streamed,
`--concurrency` requests in flight (closed loop), `--requests` per scenario. Scenarios:

- **affinity**: model `replicas` = [rep-0, rep-1, rep-2] with `server.cache.prefix_affinity:
  true`; the router puts the prefix's favourite replica first (rendezvous hashing, load bound).
- **round-robin**: the fair baseline. The router has no round-robin strategy among a model's
  deployments (with affinity off it orders them by the ranker, which is not round-robin), so the
  client rotates its requests over three pinned single-replica models `rep-0/1/2`. Each request
  still passes through the same router, and the replicas see exactly round-robin traffic.
- **affinity off**: model `replicas` on a second router with `prefix_affinity: false` (what the
  knob does: the ranker's order, usually one replica first). Printed for reference only.

Each replica's prefix cache and counters are reset before each scenario. TTFT is measured at
the client (first content chunk). The result cache is off (`backend: none`).

    .venv/bin/python bench/prefix_affinity.py [--requests 180] [--concurrency 3]

Target (issue 6): affinity cuts mean TTFT by at least 30% against round-robin.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

from router.cli_types import seed_number
from tests.support.services import Running, start_router, start_simulator

REPLICAS = 3
API_KEY = "sk-prefix-bench"
ENV = {"PREFIX_BENCH_KEY": API_KEY}
WORDS = ("policy", "order", "refund", "account", "invoice", "shipping", "warranty", "customer",
         "return", "support", "ticket", "escalate", "priority", "region", "contract", "renewal",
         "discount", "schedule")


def replica_profile(capacity: int) -> dict[str, object]:
    """A self-hosted replica: ~100 ms base TTFT + 0.4 ms/prompt token; x0.25 on a prefix hit."""
    return {"ttft_p50_ms": 100, "ttft_p99_ms": 130, "prefill_ms_per_token": 0.4,
            "tpot_p50_ms": 2, "tpot_p99_ms": 3, "output_tokens_p50": 16,
            "output_tokens_p99": 16, "output_tokens_max": 16, "prefix_cache_factor": 0.25,
            "prefix_cache_ttl_s": 3600, "prefix_cache_capacity": capacity,
            "prefix_cache_min_tokens": 256}


def system_prompts(count: int, chars: int = 4000) -> list[str]:
    """`count` distinct long system prompts (deterministic)."""
    prompts = []
    for n in range(count):
        rng = random.Random(n)
        words = [f"You are support assistant number {n} of Acme."]
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS))
        prompts.append(" ".join(words))
    return prompts


def router_yaml(sim_bases: Sequence[str], affinity: bool) -> str:
    deployments = "".join(
        f"\n  - name: rep-{i}\n    model: openai/replica\n    adapter: openai_passthrough"
        f"\n    api_base: {base}/v1\n    input_price_per_mtok: 0\n    output_price_per_mtok: 1"
        f"\n    timeout_s: 30" for i, base in enumerate(sim_bases))
    names = ", ".join(f"rep-{i}" for i in range(len(sim_bases)))
    singles = "".join(f"\n  - name: single-{i}\n    deployments: [rep-{i}]"
                      for i in range(len(sim_bases)))
    return f"""version: 1
deployments:{deployments}
models:
  - name: replicas
    deployments: [{names}]{singles}
routes:
  aliases: [auto]
  default_model: replicas
api_keys:
  - key: env:PREFIX_BENCH_KEY
    tenant: bench
    scopes: [read]
server:
  request_timeout_s: 60
  cache:
    backend: none
    prefix_affinity: {str(affinity).lower()}
"""


@dataclass(frozen=True)
class Result:
    ttft_ms: list[float]
    hits: list[int]       # prefix-cache hits per replica (simulator counters)
    requests: list[int]   # requests per replica


async def one(client: openai.AsyncOpenAI, model: str, system: str, question: str) -> float:
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model, stream=True, temperature=0.7,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
        extra_headers={"x-slorouter-task": "chat", "x-slorouter-risk": "low"})
    ttft: float | None = None
    async for chunk in stream:
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = (time.perf_counter() - started) * 1000
    if ttft is None:
        raise RuntimeError("stream without content")
    return ttft


async def scenario(router: Running, sims: Sequence[Running], model_of: Callable[[int], str],
                   plan: Sequence[int], prompts: Sequence[str], concurrency: int,
                   tag: str) -> Result:
    for sim in sims:
        httpx.post(f"{sim.base_url}/control/reset", timeout=10,
                   json={"profiles": False, "stats": True, "prefix_cache": True})
    client = openai.AsyncOpenAI(base_url=f"{router.base_url}/v1", api_key=API_KEY,
                                max_retries=0, timeout=60)
    ttfts: list[float] = [0.0] * len(plan)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(len(plan)):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            question = f"[{tag} {i}] What is the status of order {1000 + i}?"
            ttfts[i] = await one(client, model_of(i), prompts[plan[i]], question)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    await client.close()
    hits, requests = [], []
    for sim in sims:
        stats = httpx.get(f"{sim.base_url}/control/stats", timeout=10).json()["models"]
        replica = stats.get("replica", {})
        hits.append(int(replica.get("prefix_cache", {}).get("hits", 0)))
        requests.append(int(replica.get("requests", 0)))
    return Result(ttfts, hits, requests)


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(results: dict[str, Result], args: argparse.Namespace, loads: Sequence[str]) -> None:
    print(f"prefix affinity vs round-robin: {REPLICAS} replicas (one simulator process each), "
          f"{args.prompts} system prompts of ~1000 tokens, prefix cache {args.capacity} "
          f"prefixes/replica, {args.requests} streamed requests per scenario, concurrency "
          f"{args.concurrency}")
    print(f"load average before {loads[0]}, after {loads[1]}; {os.cpu_count()} CPUs")
    names = list(results)
    print(f"{'TTFT ms':<22}" + "".join(f"{n:>16}" for n in names))
    rows: list[tuple[str, Callable[[Result], str]]] = [
        ("mean", lambda r: f"{statistics.fmean(r.ttft_ms):.1f}"),
        ("p50", lambda r: f"{pct(r.ttft_ms, 0.5):.1f}"),
        ("p99", lambda r: f"{pct(r.ttft_ms, 0.99):.1f}"),
        ("prefix hit rate", lambda r: f"{sum(r.hits) / max(1, sum(r.requests)):.2f}"),
        ("requests/replica", lambda r: "/".join(str(n) for n in r.requests)),
    ]
    for label, cell in rows:
        print(f"{label:<22}" + "".join(f"{cell(results[n]):>16}" for n in names))
    cut = 1 - statistics.fmean(results["affinity"].ttft_ms) / statistics.fmean(
        results["round-robin"].ttft_ms)
    verdict = "met" if cut >= 0.30 else "NOT met"
    print(f"target: affinity cuts mean TTFT by >= 30% vs round-robin: {verdict} ({cut:.0%})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=180)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--seed", type=seed_number, default=7)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    plan = [rng.randrange(args.prompts) for _ in range(args.requests)]
    prompts = system_prompts(args.prompts)
    loads = [" ".join(f"{x:.2f}" for x in os.getloadavg())]
    results: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="prefix-affinity-") as tmp:
        base = Path(tmp)
        sims = [start_simulator(base, {"replica": replica_profile(args.capacity)},
                                name=f"sim-{i}") for i in range(REPLICAS)]
        routers: list[Running] = []
        try:
            bases = [s.base_url for s in sims]
            routers.append(start_router(base, router_yaml(bases, True), ENV, name="affinity"))
            routers.append(start_router(base, router_yaml(bases, False), ENV, name="off"))
            on, off = routers
            results["affinity"] = asyncio.run(scenario(
                on, sims, lambda i: "replicas", plan, prompts, args.concurrency, "aff"))
            results["round-robin"] = asyncio.run(scenario(
                on, sims, lambda i: f"single-{i % REPLICAS}", plan, prompts,
                args.concurrency, "rr"))
            results["affinity off"] = asyncio.run(scenario(
                off, sims, lambda i: "replicas", plan, prompts, args.concurrency, "off"))
        finally:
            for running in [*routers, *sims]:
                running.stop()
    loads.append(" ".join(f"{x:.2f}" for x in os.getloadavg()))
    report(results, args, loads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
