"""Benchmark: the cost of scoring one request over 10 candidates (budget: p99 <= 0.2 ms).

Builds a `LocalStatsStore` with realistic data for 10 deployments (several tasks and prompt
sizes, so every fallback level and the TTFT model are populated), then times, per request:
`rank()` alone, `view()` x 10 + `rank()` (the decision step's whole read), `record()` (the
`finally` write) and a summary recompute (what a stale key costs, at most every 100 ms per key).
Run: `.venv/bin/python bench/scoring.py`.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable

from router.scoring import Candidate, ScoreRequest, ScoringConfig, rank
from router.slo import SloTargets
from router.stats import ANY_BUCKET, LocalStatsStore, Observation

N_CANDIDATES = 10
N_REQUESTS = 20_000
TARGETS = SloTargets(ttft_p95_s=1.0, tpot_p95_s=0.05, e2e_p99_s=8.0, availability=0.99)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def _populate(store: LocalStatsStore, clock: Clock, rng: random.Random) -> list[str]:
    deps = [f"dep-{i}" for i in range(N_CANDIDATES)]
    for _ in range(20_000):
        d = rng.randrange(N_CANDIDATES)
        prompt = rng.choice((200, 800, 3000, 9000))
        ttft = (0.15 + 0.02 * d + 0.05 * d * prompt / 1000) * rng.lognormvariate(0, 0.25)
        err = "ProviderTimeout" if rng.random() < 0.01 else None
        store.record(Observation(deps[d], rng.choice(("chat", "code")), prompt, 120,
                                 None if err else ttft, 0.02, ttft + 2.4, 0.0, err, False,
                                 clock.now))
        clock.now += 0.001
    store.refresh()
    return deps


def _percentiles(samples_ns: list[int]) -> str:
    s = sorted(samples_ns)
    p50, p99 = s[len(s) // 2] / 1e3, s[int(len(s) * 0.99)] / 1e3
    return f"p50 {p50:7.1f} us   p99 {p99:7.1f} us   mean {statistics.fmean(s) / 1e3:7.1f} us"


def _time(fn: Callable[[], object], n: int,
          clock: Callable[[], int] = time.perf_counter_ns) -> list[int]:
    out = []
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def _calibration() -> float:
    """Microseconds for `sum(range(1000))`: ~8-10 us on a quiet modern core; more = busy box."""
    return min(_time(lambda: sum(range(1000)), 2_000)) / 1e3


def main() -> None:
    rng, clock = random.Random(1), Clock()
    store = LocalStatsStore(clock=clock)
    deps = _populate(store, clock, rng)
    config = ScoringConfig(explore_share=0.03)
    request = ScoreRequest("chat", "low", 3000, 256)
    views = [store.view(d, "chat", 3000) for d in deps]
    cands = [Candidate(d, 0.5 + i, 1.0 + 2 * i, v) for i, (d, v) in enumerate(zip(deps, views,
                                                                                 strict=True))]
    history = store.task_summary("chat")
    out_hist = history.output_tokens if history is not None else None

    def rank_only() -> object:
        return rank(request, TARGETS, cands, config, now=clock.now, rng=rng,
                    output_history=out_hist)

    def views_and_rank() -> object:
        fresh = [Candidate(d, 0.5 + i, 1.0 + 2 * i, store.view(d, "chat", 3000))
                 for i, d in enumerate(deps)]
        return rank(request, TARGETS, fresh, config, now=clock.now, rng=rng,
                    output_history=out_hist)

    obs = Observation(deps[0], "chat", 3000, 120, 0.3, 0.02, 2.7, 0.0, None, False, clock.now)
    key = (deps[0], "chat", ANY_BUCKET)
    state = store.own_states()[key]
    rank_ns = _time(rank_only, N_REQUESTS)
    read_ns = _time(views_and_rank, N_REQUESTS)
    read_cpu_ns = _time(views_and_rank, N_REQUESTS, time.thread_time_ns)
    record_ns = _time(lambda: store.record(obs), N_REQUESTS)
    summary_ns = _time(lambda: state.summarize(clock.now), 2_000)
    print(f"scoring benchmark: {N_CANDIDATES} candidates, {N_REQUESTS} requests; "
          f"calibration sum(range(1000)) = {_calibration():.1f} us, load {os.getloadavg()[0]:.1f}")
    print(f"  rank()                 {_percentiles(rank_ns)}")
    print(f"  view() x10 + rank()    {_percentiles(read_ns)}")
    print(f"    same, CPU time       {_percentiles(read_cpu_ns)}")
    print(f"  record() per attempt   {_percentiles(record_ns)}")
    print(f"  summary recompute/key  {_percentiles(summary_ns)}")
    p99_ms = sorted(read_ns)[int(len(read_ns) * 0.99)] / 1e6
    print(f"  budget p99 <= 0.200 ms: {'OK' if p99_ms <= 0.2 else 'OVER'} ({p99_ms:.3f} ms)")


if __name__ == "__main__":
    main()
