"""The machine's own latency noise, the floor every tail figure here stands on.

    python -m bench.machine [--cpus 0,1] [--seconds 5]

Per core (this process pinned to it, nothing else of ours running), three figures that no code
of slorouter's can change:

* **fixed work**: the same pure Python computation (about 60 us, and about 600 us) timed again
  and again: its p99 / p50. On bare metal that ratio is close to 1; on a virtual machine the
  hypervisor slows or takes away the core, and the guest counts that time as the thread's own
  CPU time (no steal is reported), so a p99 target for a computation of length L cannot hold
  below about ratio x L.
* **core losses**: pure Python work in chunks of about 1 ms for `--seconds`: how many chunks took
  over 5 ms longer than the median chunk, per busy second. A loop that is busy B seconds should
  expect about B x that many stalls over 5 ms from the machine alone.
* **idle wake-ups**: an asyncio loop with nothing to do but sleep 1 ms at a time: how late it
  wakes (p50 / p99 / max, and how many wake-ups were over 5 ms late).

The other benchmarks print the parts they need beside their own figures (`bench.loop_stalls`,
`bench/scoring.py`); this command gives the whole picture at once, to judge a machine before
trusting tail latencies measured on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Sequence

STALL_S = 0.005


def burn(n: int) -> int:
    """`n` iterations of pure Python work (no allocation worth the name, no I/O, no GIL release)."""
    total = 0
    for i in range(n):
        total += i
    return total


def iterations_per_ms() -> int:
    """Iterations of `burn` per millisecond on the current core (median of 21 trials)."""
    n, times = 50_000, []
    for _ in range(21):
        start = time.perf_counter()
        burn(n)
        times.append(time.perf_counter() - start)
    return max(1, int(n / (sorted(times)[10] * 1e3)))


def quantiles_us(samples_s: Sequence[float]) -> tuple[float, float, float]:
    """p50, p99 and p99.9 of `samples_s`, in microseconds."""
    s = sorted(samples_s)
    n = len(s)
    return s[n // 2] * 1e6, s[min(n - 1, int(n * 0.99))] * 1e6, s[min(n - 1, int(n * 0.999))] * 1e6


def fixed_work(iterations: int, seconds: float) -> list[float]:
    """Durations (s) of `burn(iterations)` run back to back for `seconds`."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        burn(iterations)
        out.append(time.perf_counter() - start)
    return out


def core_losses(seconds: float, per_ms: int) -> tuple[int, float]:
    """Chunks of ~1 ms of work for `seconds`: how many took over `STALL_S` longer than the
    median chunk, and the busy seconds."""
    times = fixed_work(per_ms, seconds)
    median = sorted(times)[len(times) // 2]
    return sum(1 for t in times if t - median >= STALL_S), sum(times)


async def idle_lateness(seconds: float, tick_s: float = 0.001) -> list[float]:
    """How late (s) an otherwise idle loop wakes from `tick_s` sleeps, for `seconds`."""
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        await asyncio.sleep(tick_s)
        out.append(max(0.0, time.perf_counter() - start - tick_s))
    return out


def describe_core(cpu: int, seconds: float) -> list[str]:
    os.sched_setaffinity(0, {cpu})
    per_ms = iterations_per_ms()
    lines = []
    for work_us in (60, 600):
        p50, p99, p999 = quantiles_us(fixed_work(max(1, per_ms * work_us // 1000), seconds / 2))
        lines.append(f"  fixed work ~{work_us} us: p50 {p50:7.1f}  p99 {p99:7.1f}  "
                     f"p99.9 {p999:8.1f} us   p99/p50 {p99 / p50:.2f}")
    losses, busy_s = core_losses(seconds, per_ms)
    lines.append(f"  core losses > {STALL_S * 1e3:.0f} ms: {losses} in {busy_s:.1f} busy s = "
                 f"{losses / busy_s:.1f} per busy second")
    late = asyncio.run(idle_lateness(seconds))
    p50, p99, _ = quantiles_us(late)
    over = sum(1 for x in late if x >= STALL_S)
    lines.append(f"  idle loop, 1 ms sleeps: late p50 {p50 / 1e3:.2f}  p99 {p99 / 1e3:.2f}  "
                 f"max {max(late) * 1e3:.2f} ms; {over} wake-ups over {STALL_S * 1e3:.0f} ms "
                 f"late in {seconds:g} s")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--cpus", default=",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    print(f"machine noise: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    for cpu in (int(c) for c in args.cpus.split(",")):
        print(f"CPU {cpu}:")
        for line in describe_core(cpu, args.seconds):
            print(line)


if __name__ == "__main__":
    main()
