"""What the SLO tracker's rolling windows hold and cost per series, tiered beside one ring.

    python -m bench.slo_memory [--deployments 12] [--sizes 5]

The tracker keeps one series per (task, deployment, prompt size) that had traffic, plus one per
(task, deployment) and per task. Each series is summed over the burn rules' windows (5 min,
30 min, 1 h, 6 h) and the demotion's last minute. Side by side, over the same six hours of
events (one per series and minute, 2% bad):

* **one ring**: 10 s slots over the longest window (`RollingCounts`, the layout until
  2026-12-07, then in 64-bit counts: twice the bytes shown here);
* **tiered** (shipped): 10 s slots up to 30 minutes, 1 min slots beyond (`TieredCounts`).

For each: bytes per series (the slots' arrays) and the memory the series take in all (traced
allocations), the time to count one event and to read every window's sums (kept between
reads, as the refresher reads them). Then, for the shipped tracker filled the same way,
`GET /v1/slo`'s snapshot time (on the event loop).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable

from policies.labels import TASKS
from router.slo import SloTargets, SloTracker
from router.slo.tracker import SloConfig
from router.slo.windows import RollingCounts, TieredCounts
from router.stats import Observation

HOURS = 6
PROMPTS = (100, 1000, 4000, 16000, 40000)  # one in each prompt-size bucket
Series = RollingCounts | TieredCounts


def _events(count: int) -> list[list[int]]:
    """Deltas of `count` events, 2% of them bad on every SLI."""
    return [[1, int(i % 50 == 0)] * 4 for i in range(count)]


def _measure(label: str, make: Callable[[], Series], series: int, windows: tuple[float, ...],
             now: float) -> None:
    tracemalloc.start()
    built = [make() for _ in range(series)]
    deltas = _events(HOURS * 60)
    for ring in built:
        for minute, event in enumerate(deltas):
            ring.add(now - HOURS * 3600 + minute * 60 + 5, event)
    allocated, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ring = built[0]
    ring.sums(now, windows)
    adds, reads = [], []
    for _ in range(2000):
        started = time.perf_counter_ns()
        ring.add(now, deltas[1])
        adds.append(time.perf_counter_ns() - started)
        started = time.perf_counter_ns()
        ring.sums(now, windows)
        reads.append(time.perf_counter_ns() - started)
    print(f"{label:<10} {ring.nbytes / 1e3:>9.1f} KB/series {allocated / 2**20:>9.1f} MB "
          f"for {series} series   add p50 {statistics.median(adds) / 1e3:5.2f} us   "
          f"sums p50 {statistics.median(reads) / 1e3:5.2f} us")


def _snapshot_ms(deployments: int, sizes: int,
                 now: float) -> tuple[int, list[float], list[float]]:
    targets = SloTargets(ttft_p95_s=0.5, e2e_p99_s=2.0, availability=0.99)
    tracker = SloTracker({task: targets for task in TASKS}, service_availability=0.99)
    for minute in range(HOURS * 60):
        t = now - HOURS * 3600 + minute * 60
        for task in TASKS:
            for d in range(deployments):
                prompt = PROMPTS[(minute + d) % sizes]
                obs = Observation(f"dep-{d}", task, prompt, 100, 0.3, 0.02, 1.0, 0.0,
                                  "ProviderError" if (minute + d) % 50 == 0 else None, False, t)
                tracker.record_attempt(obs)
                tracker.record_request(obs)
    times, tasks_only = [], []
    for _ in range(5):
        started = time.perf_counter()
        tracker.snapshot(now)
        times.append((time.perf_counter() - started) * 1e3)
        started = time.perf_counter()
        tracker.snapshot(now, deployments=False)  # what the SLO gauges read
        tasks_only.append((time.perf_counter() - started) * 1e3)
    return len(tracker._series), times, tasks_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=12,
                        help="deployments serving every task (default 12)")
    parser.add_argument("--sizes", type=int, default=5, choices=range(1, len(PROMPTS) + 1),
                        help="prompt sizes each deployment sees (default 5)")
    args = parser.parse_args()
    config = SloConfig()
    windows = tuple(sorted({*config.windows_s, config.current_s}))
    # per task: each deployment's sizes and all sizes, and the task's own series
    series = len(TASKS) * (args.deployments * (args.sizes + 1) + 1)
    now = 1_000_000.0
    print(f"{series} series ({len(TASKS)} tasks x {args.deployments} deployments x "
          f"({args.sizes} prompt sizes + all) + one per task), windows {windows} s, "
          f"{HOURS} h of events, one a minute")
    _measure("one ring", lambda: RollingCounts(max(windows), config.resolution_s), series,
             windows, now)
    _measure("tiered", lambda: TieredCounts(windows, config.resolution_s), series, windows, now)
    count, times, tasks_only = _snapshot_ms(args.deployments, args.sizes, now)
    print(f"GET /v1/slo snapshot, shipped tracker with {count} series: "
          f"{', '.join(f'{t:.0f}' for t in times)} ms (first: no sums kept yet); the SLO "
          f"gauges' (tasks only): {', '.join(f'{t:.1f}' for t in tasks_only)} ms")


if __name__ == "__main__":
    main()
