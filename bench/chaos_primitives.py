"""Numbers for the reliability building blocks, on simulated traffic (no network, no simulator).

    .venv/bin/python bench/chaos_primitives.py

Prints, side by side:
1. retry budget vs the "one of two deployments returns 30% 5xx" case: success rate and retry
   amplification for budget shares and routing splits (failed attempts fall back to the other
   deployment when the budget allows);
2. hedging vs a heavy TTFT tail (10% of requests at 10x): p50/p99 first-content time and hedge
   load, with the hedge budget;
3. how many consecutive failures a hanging deployment takes to open its breaker;
4. how fast admission rejects when full (the acceptance asks for < 50 ms).
Seeds are fixed, so the numbers are reproducible. `bench/chaos.py` (the lead's) measures the
real service end to end; this file only checks that the parameters can meet the targets.
"""

from __future__ import annotations

import asyncio
import random
import time

from router.admission import AdmissionController, AdmissionPolicy, PoolLimits
from router.errors import OverloadedError
from router.execution.breaker import BreakerPolicy, CircuitBreaker
from router.execution.hedging import HedgeInputs, plan_hedge
from router.execution.retry_budget import Budget, BudgetPolicy


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def retry_amplification(share: float, bad_split: float, rps: float = 100.0,
                        seconds: float = 120.0, fail_p: float = 0.3) -> tuple[float, float]:
    """(success rate, upstream calls per request) with fallback to the healthy deployment."""
    rng = random.Random(7)
    clock = ManualClock()
    budget = Budget(BudgetPolicy(share=share, floor_per_s=1.0, window_s=10.0), clock)
    ok = calls = requests = 0
    while clock.now < seconds:
        clock.now += rng.expovariate(rps)
        requests += 1
        budget.record_request()
        calls += 1
        first_bad = rng.random() < bad_split
        if not (first_bad and rng.random() < fail_p):
            ok += 1
        elif budget.try_spend():
            calls += 1
            ok += 1  # the fallback goes to the healthy deployment
    return ok / requests, calls / requests


def hedging(hedge: bool, share: float, at: float, n: int = 20_000,
            rps: float = 100.0) -> tuple[float, float, float]:
    """(p50, p99 TTFT in s, hedge load): 10% of the primary's attempts at 10x, not the
    alternate's (as in the acceptance case: one deployment has the heavy tail)."""
    rng = random.Random(11)
    clock = ManualClock()
    budget = Budget(BudgetPolicy(share=share, floor_per_s=0.2, window_s=10.0), clock)

    def ttft(tail: float = 0.10) -> float:
        base = rng.lognormvariate(-0.7, 0.25)  # ~0.5 s median
        return base * 10 if rng.random() < tail else base

    predicted = percentile([ttft() for _ in range(5000)], at)
    results: list[float] = []
    hedges = 0
    for _ in range(n):
        clock.now += rng.expovariate(rps)
        budget.record_request()
        first = ttft()
        plan = plan_hedge(HedgeInputs(hedge, "chat", "low", False, True, predicted, 30.0))
        delay = plan.delay_s
        if delay is not None and first > delay and budget.try_spend():
            hedges += 1
            first = min(first, delay + ttft(tail=0.0))  # the alternate has no tail
        results.append(first)
    return percentile(results, 0.5), percentile(results, 0.99), hedges / n


def breaker_failures_to_open() -> int:
    breaker = CircuitBreaker(BreakerPolicy(), ManualClock())
    failures = 0
    while (permit := breaker.allow()) is not None:
        breaker.on_failure(permit)
        failures += 1
    return failures


async def rejection_latency_ms(samples: int = 5000) -> tuple[float, float]:
    """(p50, p99) milliseconds to refuse a request when slots and queue are full."""
    limits = PoolLimits(max_concurrency=1, max_queue=1, max_queue_wait_s=60.0)
    admission = AdmissionController(AdmissionPolicy({"interactive": limits,
                                                     "background": limits}), time.monotonic)
    release = asyncio.Event()

    async def hold(tenant: str) -> None:
        async with admission.admit(tenant, "interactive"):
            await release.wait()

    holders = [asyncio.ensure_future(hold(t)) for t in ("a", "b")]
    await asyncio.sleep(0)
    timings: list[float] = []
    for n in range(samples):
        start = time.perf_counter()
        try:
            async with admission.admit(f"t{n}", "interactive"):
                pass
        except OverloadedError:
            timings.append((time.perf_counter() - start) * 1000)
    release.set()
    await asyncio.gather(*holders)
    return percentile(timings, 0.5), percentile(timings, 0.99)


def main() -> None:
    print("1. 30% 5xx on one of two deployments (100 rps, floor 1/s, window 10 s)")
    print(f"   {'share':>6} {'to bad':>7} {'success':>9} {'calls/req':>10}")
    for share in (0.1, 0.2):
        for split in (0.5, 0.2):
            success, amp = retry_amplification(share, split)
            print(f"   {share:>6.2f} {split:>7.0%} {success:>9.3%} {amp:>10.3f}")
    print("2. hedging after a predicted TTFT percentile; 10% of first attempts at 10x (100 rps)")
    for hedge, share, at in ((False, 0.0, 0.9), (True, 0.10, 0.90), (True, 0.10, 0.88),
                             (True, 0.14, 0.88), (True, 0.14, 0.86)):
        p50, p99, load = hedging(hedge, share, at)
        print(f"   hedge={hedge!s:<5} at p{at * 100:.0f} budget={share:.0%} p50={p50:.3f}s "
              f"p99={p99:.3f}s hedge load={load:.1%}")
    print(f"3. consecutive failures until a hanging deployment's breaker opens: "
          f"{breaker_failures_to_open()}")
    p50, p99 = asyncio.run(rejection_latency_ms())
    print(f"4. admission rejection when full: p50={p50:.4f} ms p99={p99:.4f} ms")


if __name__ == "__main__":
    main()
