"""Chaos bench: the reliability acceptance scenarios against the real service, as one table.

    .venv/bin/python -m bench.chaos [--scale 1.0] [--seed 7]
                                    [--scenarios faults,overload,hedging,quiet-hedging]

Starts one provider simulator and one `slorouter serve` per configuration (the fault matrix,
overload with and without a queue, hedging, a quiet streamed task hedged beside a busy one),
offers open-loop Poisson load and prints, per
scenario: requests, client success %, upstream calls per request (counted by the simulator),
p50/p99 E2E of successful requests, breaker transitions seen at `/v1/health/deployments`,
rejections with their p50/p99 latency, and notes (the scenario's own acceptance number).
`--scale` multiplies every request count (0.3 for a quick look). The light versions of the same
scenarios, with assertions, are `tests/faults/`; `bench/chaos_primitives.py` simulates the
building blocks without processes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from policies.schema import BreakerSpec
from router.cli_types import seed_number
from router.providers.simulator.client import SimulatorControl
from tests.faults.scenarios import (
    FAULT_MODELS,
    HANGING,
    HEDGE_POLICIES,
    MATRIX_POLICIES,
    TENANT_ENV,
    THROTTLED,
    BreakerWatch,
    Call,
    Dep,
    Shot,
    SimCounters,
    chat_body,
    closed_loop,
    e2e,
    open_loop,
    percentile,
    router_yaml,
    rss_kib,
    run,
    steady,
    varied_body,
)
from tests.support.services import Running, start_router, start_simulator

BENCH_MODELS = {**FAULT_MODELS, "cut-some": steady(20, 30, cut_rate=0.2, cut_after_chunks=3)}


@dataclass
class Row:
    scenario: str
    shots: Sequence[Shot]
    upstream_calls: int | None = None
    transitions: str = "-"
    notes: str = ""

    def cells(self) -> list[str]:
        n = len(self.shots)
        ok = [s.e2e_s for s in self.shots if s.ok]
        rejected = [s.e2e_s for s in self.shots if s.status in (429, 503) and s.retry_after]
        per_request = f"{self.upstream_calls / n:.3f}" if self.upstream_calls is not None else "-"
        rej = (f"{len(rejected)} ({_ms(percentile(rejected, 50))}/{_ms(percentile(rejected, 99))})"
               if rejected else "0")
        return [self.scenario, str(n), f"{100 * len(ok) / n:.2f}", per_request,
                _ms(percentile(ok, 50)), _ms(percentile(ok, 99)), self.transitions, rej,
                self.notes]


HEADER = ["scenario", "requests", "success %", "upstream/req", "E2E p50 ms", "E2E p99 ms",
          "breaker transitions", "rejected (p50/p99 ms)", "notes"]


def _ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1e3:.0f}"


def print_table(rows: Sequence[Row]) -> None:
    cells = [HEADER, *(row.cells() for row in rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(HEADER))]
    for index, line in enumerate(cells):
        print(" | ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
        if index == 0:
            print("-+-".join("-" * w for w in widths))


# ---------------------------------------------------------------------- processes

MATRIX_DEPS = [
    Dep("fivexx-bad", "fivexx-bad"), Dep("fivexx-good", "fivexx-good"),
    Dep("hang", "hang", timeout_s=0.4), Dep("hang-backup", "hang-backup"),
    Dep("limited", "limited"), Dep("limited-backup", "limited-backup"),
    Dep("cut-some", "cut-some"), Dep("cut-backup", "cut-backup"), Dep("act", "act"),
]
# Models of the fault matrix; its policies are `MATRIX_POLICIES` (tests/faults/scenarios.py).
MATRIX_MODELS = {"five-xx": ["fivexx-bad", "fivexx-good"], "hanging": ["hang"],
                 "hanging-backup": ["hang-backup"], "throttled": ["limited"],
                 "throttled-backup": ["limited-backup"], "cut": ["cut-some", "cut-backup"],
                 "act": ["act"]}


@contextmanager
def router(directory: Path, sim: Running, name: str, deps: Sequence[Dep],
           models: dict[str, list[str]], reliability: str = "    {}",
           policies: str = "") -> Iterator[Running]:
    config = router_yaml(sim.base_url, deps, models, reliability, policies)
    running = start_router(directory, config, env=TENANT_ENV, name=name)
    try:
        yield running
    finally:
        running.stop()


def calls_to(counters: SimCounters, models: Sequence[str], work: Callable[[], list[Shot]]
             ) -> tuple[list[Shot], int]:
    """Run `work`; return its shots and the upstream calls the simulator saw on `models`."""
    before = counters.snapshot(models)
    shots = work()
    after = counters.snapshot(models)
    return shots, sum(after[m] - before[m] for m in models)


def transitions(watch: BreakerWatch, deployment: str) -> str:
    states = watch.transitions(deployment)
    return "→".join(["closed", *states]) if states else "none"


class CounterWatch:
    """Polls one simulator counter in a thread and brackets when it changed (upstream arrivals).

    A change seen by one poll happened after the previous poll started and before this one
    ended, so each arrival is known within an interval; gaps are reported as intervals too."""

    def __init__(self, counters: SimCounters, model: str, period_s: float = 0.02) -> None:
        self._counters, self._model, self._period = counters, model, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.first = 0
        self.changes: list[tuple[float, float, int]] = []  # (after, before, value)

    def __enter__(self) -> CounterWatch:
        self.first = self._counters.value(self._model)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        last, previous_start = self.first, time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            value = self._counters.value(self._model)
            if value != last:
                self.changes.append((previous_start, time.monotonic(), value))
                last = value
            previous_start = started
            self._stop.wait(self._period)

    def calls(self) -> int:
        return (self.changes[-1][2] if self.changes else self.first) - self.first

    def gaps_s(self) -> list[tuple[float, float]]:
        """(shortest, longest) possible time between successive observed changes."""
        return [(b[0] - a[1], b[1] - a[0]) for a, b in itertools.pairwise(self.changes)]


# ---------------------------------------------------------------------- fault matrix

HOLDS_AFTER = BreakerSpec().holds_after  # the router's default, as the bench serves it


def five_xx(gw: Running, counters: SimCounters, n: int, rate: float, seed: int) -> Row:
    calls = [Call(varied_body("five-xx")) for _ in range(n)]
    with BreakerWatch(gw.base_url) as watch:
        shots, upstream = calls_to(counters, ["fivexx-bad", "fivexx-good"],
                                   lambda: run(open_loop(gw.base_url, calls, rate, seed)))
    return Row("5xx: 30% on 1 of 2 deployments", shots, upstream,
               transitions(watch, "fivexx-bad"), "targets: >=99.9% ok, <=1.2 upstream/req")


def hang(gw: Running, sim: Running, counters: SimCounters, n: int, rate: float,
         seed: int) -> Row:
    deadline_ms = 3000
    calls = [Call(varied_body("auto"), {**HANGING, "x-slorouter-timeout-ms": str(deadline_ms)})
             for _ in range(n)]
    control = SimulatorControl(sim.base_url)
    hangs_before = counters.value("hang", "hangs")
    heal = threading.Timer(n / rate / 2, control.set_profile, ("hang", {"hang_rate": 0.0}))
    try:
        with BreakerWatch(gw.base_url) as watch, CounterWatch(counters, "hang") as arrivals:
            heal.start()
            shots, upstream = calls_to(counters, ["hang", "hang-backup"],
                                       lambda: run(open_loop(gw.base_url, calls, rate, seed)))
    finally:
        heal.cancel()
        control.set_profile("hang", {"hang_rate": 1.0})
    hung = counters.value("hang", "hangs") - hangs_before
    opened = next((t for t, d, state in watch.changes if d == "hang" and state == "open"), None)
    before_open = max((v for _, seen, v in arrivals.changes if opened is None or seen <= opened),
                      default=arrivals.first) - arrivals.first
    slowest = max(s.e2e_s for s in shots)
    return Row("hang on a candidate, healed halfway", shots, upstream, transitions(watch, "hang"),
               f"{before_open} calls before it opened, {hung} hung in all; slowest "
               f"{slowest * 1e3:.0f} ms vs {deadline_ms} ms deadline")


def throttled(gw: Running, counters: SimCounters, n: int, rate: float, seed: int) -> Row:
    retry_after = float(str(FAULT_MODELS["limited"]["retry_after_s"]))
    calls = [Call(varied_body("auto"), THROTTLED) for _ in range(n)]
    with BreakerWatch(gw.base_url) as watch, CounterWatch(counters, "limited") as arrivals:
        shots, upstream = calls_to(counters, ["limited", "limited-backup"],
                                   lambda: run(open_loop(gw.base_url, calls, rate, seed)))
    # The breaker holds the deployment from its `holds_after`-th 429 in a row (2 by default):
    # the gap between the first two is not bound by Retry-After, every later one is.
    gaps = arrivals.gaps_s()[HOLDS_AFTER - 1:]
    early = sum(1 for _, longest in gaps if longest < retry_after)
    if gaps:
        closest = min(gaps, key=lambda gap: gap[1])
        spacing = f"once held, closest two {closest[0]:.2f}-{closest[1]:.2f} s apart"
    else:  # a small run: fewer calls than it takes to hold the deployment
        spacing = f"never held (fewer than {HOLDS_AFTER + 1} calls)"
    return Row(f"429 storm, Retry-After {retry_after:g} s", shots, upstream,
               transitions(watch, "limited"),
               f"{arrivals.calls()} calls to the throttled one; {spacing}; {early} surely "
               "before Retry-After")


def cut_streams(gw: Running, counters: SimCounters, n: int, rate: float, seed: int) -> Row:
    calls = [Call(varied_body("cut", stream=True)) for _ in range(n)]
    shots, upstream = calls_to(counters, ["cut-some", "cut-backup"],
                               lambda: run(open_loop(gw.base_url, calls, rate, seed)))
    errors = sum(1 for s in shots if s.stream_error)
    truncated = sum(1 for s in shots if s.truncated_success)
    return Row("stream cut mid-answer (20% of 1 of 2)", shots, upstream, notes=(
        f"{errors} ended with an error event, {truncated} truncated successes (target 0)"))


def duplicates(gw: Running, counters: SimCounters, copies: int = 100) -> Row:
    headers = {"x-slorouter-task": "action", "idempotency-key": f"bench-{uuid.uuid4()}"}
    call = Call(chat_body("auto", messages=[{"role": "user", "content": "Book a table."}]),
                headers)
    shots, upstream = calls_to(counters, ["act"], lambda: run(
        closed_loop(gw.base_url, [call] * copies, concurrency=copies)))
    replies = len({s.response_id for s in shots if s.ok})
    return Row(f"{copies} concurrent duplicate actions", shots, upstream,
               notes=f"{upstream} upstream call(s) (target 1), {replies} distinct answer(s)")


# ---------------------------------------------------------------------- overload


class LatencyProbe:
    """GET /healthz every 100 ms in a thread: the machine's own noise under the same load."""

    def __init__(self, base_url: str) -> None:
        self._url = f"{base_url}/healthz"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: list[float] = []

    def __enter__(self) -> LatencyProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                started = time.monotonic()
                client.get(self._url)
                self.samples.append(time.monotonic() - started)
                self._stop.wait(0.1)


def overload(directory: Path, sim: Running, counters: SimCounters, max_queue: int,
             wait_s: float, seconds: float, seed: int) -> list[Row]:
    """Unloaded baseline, then Poisson arrivals at 3x the measured capacity of a 4-slot pool."""
    concurrency = 4
    reliability = (f"    interactive:\n      max_concurrency: {concurrency}\n"
                   f"      max_queue: {max_queue}\n      max_queue_wait_s: {wait_s}")
    name = f"overload-q{max_queue}"
    with router(directory, sim, name, [Dep("capacity", "capacity")],
                {"capacity": ["capacity"]}, reliability) as gw:
        call = Call(chat_body("capacity"))
        run(closed_loop(gw.base_url, [call] * 4, concurrency=1))
        unloaded, unloaded_calls = calls_to(counters, ["capacity"], lambda: run(
            closed_loop(gw.base_url, [call] * 30, concurrency=1)))
        base_p99 = percentile([s.e2e_s for s in unloaded], 99)
        rate = 3 * concurrency / percentile([s.e2e_s for s in unloaded], 50)
        rss_before = rss_kib(gw.proc.pid)
        calls = [call] * int(rate * seconds)
        with LatencyProbe(gw.base_url) as probe:
            shots, upstream = calls_to(counters, ["capacity"], lambda: run(
                open_loop(gw.base_url, calls, rate, seed)))
        rss_after = rss_kib(gw.proc.pid)
    loaded_p99 = percentile([s.e2e_s for s in shots if s.ok], 99)
    rejected = [s for s in shots if s.status in (429, 503)]
    without = sum(1 for s in rejected if s.retry_after is None)
    codes = sorted({f"{s.status} {s.error_code}" for s in rejected})
    notes = (f"p99 {loaded_p99 / base_p99:.2f}x unloaded (target <=1.5); {', '.join(codes)}; "
             f"{without} without Retry-After; RSS {rss_before // 1024}->{rss_after // 1024} "
             f"MiB; /healthz p99 {_ms(percentile(probe.samples, 99))} ms")
    return [Row(f"unloaded, 4 slots, queue {max_queue}", unloaded, unloaded_calls),
            Row(f"3x overload ({rate:.0f}/s), queue {max_queue}", shots, upstream,
                notes=notes)]


# ---------------------------------------------------------------------- hedging


def _phase(gw: Running, counters: SimCounters, task: str, n: int, rate: float,
           seed: int) -> tuple[list[Shot], int]:
    def headers() -> dict[str, str]:
        key = {"idempotency-key": f"bench-{uuid.uuid4()}"} if task == "action" else {}
        return {"x-slorouter-task": task, **key}

    calls = [Call(varied_body("auto"), headers()) for _ in range(n)]
    return calls_to(counters, ["tail", "calm"],
                    lambda: run(open_loop(gw.base_url, calls, rate, seed)))


HEDGE_WARM_UP_S = 10.0  # of `chat` traffic before its measured phase: one hedge-budget window


def hedges_skipped(base_url: str) -> dict[str, int]:
    """`slorouter.hedges.skipped` from the router's `/metrics`: hedges due and not sent, by
    reason (summed over deployments)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    skipped: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "slorouter_hedges_skipped_total":
                reason = sample.labels["slorouter_reason"]
                skipped[reason] = skipped.get(reason, 0) + int(sample.value)
    return skipped


def skipped_since(base_url: str, before: dict[str, int]) -> str:
    """The hedges not sent since `hedges_skipped` read `before`, as "N reason, ..." (or none)."""
    now = hedges_skipped(base_url)
    added = sorted((reason, count - before.get(reason, 0)) for reason, count in now.items()
                   if count > before.get(reason, 0))
    return ", ".join(f"{count} {reason}" for reason, count in added) or "none"


def hedging(directory: Path, sim: Running, counters: SimCounters, n: int, rate: float,
            seed: int) -> list[Row]:
    """The same Poisson traffic for an unhedged task, a hedged one and `action`."""
    deps = [Dep("tail", "tail"), Dep("calm", "calm")]
    models = {"tail": ["tail"], "calm": ["calm"]}
    with router(directory, sim, "hedging", deps, models, policies=HEDGE_POLICIES) as gw:
        phases = {"summarization": _phase(gw, counters, "summarization", n, rate, seed)}
        # Steady state, as tests/faults/test_hedging.py measures it: `chat` (not streamed, so
        # without the TTFT model's fallback) is hedged only once 20 of its own answers give
        # the delay, and the hedge budget's 10 s window fills
        # with the requests that earn its tokens. Measured from a cold start, the first
        # second's tail went unhedged and the budget started at its 2-token floor.
        _phase(gw, counters, "chat", int(HEDGE_WARM_UP_S * rate), rate, seed + 1)
        before = hedges_skipped(gw.base_url)
        phases["chat"] = _phase(gw, counters, "chat", n, rate, seed)
        skipped = skipped_since(gw.base_url, before)
        phases["action"] = _phase(gw, counters, "action", n, rate, seed)
    base_p99 = percentile([s.e2e_s for s in phases["summarization"][0] if s.ok], 99)
    hedged_p99 = percentile([s.e2e_s for s in phases["chat"][0] if s.ok], 99)
    extra = {task: calls - n for task, (_, calls) in phases.items()}
    return [
        Row("TTFT tail 10% at 10x, no hedging", *phases["summarization"],
            notes=f"{extra['summarization']} extra calls"),
        Row("same, hedging (chat)", *phases["chat"], notes=(
            f"p99 {100 * (hedged_p99 / base_p99 - 1):+.0f}% (target <=-30%), hedge load "
            f"{100 * extra['chat'] / n:.1f}% (target <=15%), not sent: {skipped}")),
        Row("same, action (policy allows hedging)", *phases["action"],
            notes=f"{extra['action']} extra calls (target 0: never hedged)"),
    ]


QUIET_RATE = 2.0  # req/s: a task's own sketch then holds ~14 answers, never the 20 a delay needs
BUSY_RATE = 28.0
QUIET_WARM_UP_S = 5.0  # of the busy task alone, so that the deployment's TTFT model has data


def quiet_hedging(directory: Path, sim: Running, counters: SimCounters, seconds: float,
                  seed: int) -> list[Row]:
    """A quiet streamed task beside a busy one on the same deployment (`tail`, 10% of first
    tokens at 10x): `summarization` (never hedged) at 28 req/s, `extraction` (hedged) at
    2 req/s, whose own answers never back a delay (5 s half-life: ~14 of them). It is hedged at
    the deployment's TTFT model for its prompt size; before that fallback (session 43) it was
    never hedged, and its tail was the busy task's."""
    deps = [Dep("tail", "tail"), Dep("calm", "calm")]
    models = {"tail": ["tail"], "calm": ["calm"]}

    def calls(task: str, n: int) -> list[Call]:
        return [Call(varied_body("auto", stream=True), {"x-slorouter-task": task})
                for _ in range(n)]

    async def both(busy: list[Call], quiet: list[Call]) -> tuple[list[Shot], list[Shot]]:
        together = await asyncio.gather(open_loop(gw.base_url, busy, BUSY_RATE, seed),
                                        open_loop(gw.base_url, quiet, QUIET_RATE, seed + 2))
        return together[0], together[1]

    with router(directory, sim, "quiet-hedging", deps, models, policies=HEDGE_POLICIES) as gw:
        run(open_loop(gw.base_url, calls("summarization", int(QUIET_WARM_UP_S * BUSY_RATE)),
                      BUSY_RATE, seed + 1))
        before, skipped_before = counters.snapshot(["calm"]), hedges_skipped(gw.base_url)
        busy, quiet = run(both(calls("summarization", int(BUSY_RATE * seconds)),
                               calls("extraction", int(QUIET_RATE * seconds))))
        hedges = counters.snapshot(["calm"])["calm"] - before["calm"]  # nothing fails
        skipped = skipped_since(gw.base_url, skipped_before)

    def tail_ms(shots: list[Shot], q: float) -> str:
        return _ms(percentile(e2e(shots), q))

    busy_p99, quiet_p99 = percentile(e2e(busy), 99), percentile(e2e(quiet), 99)
    return [
        Row(f"streams, busy task ({BUSY_RATE:.0f}/s), no hedging", busy, None,
            notes=f"p95 {tail_ms(busy, 95)} ms"),
        Row(f"streams, quiet task ({QUIET_RATE:.0f}/s) beside it, hedging", quiet,
            len(quiet) + hedges, notes=(
                f"p95 {tail_ms(quiet, 95)} ms, p99 {100 * (quiet_p99 / busy_p99 - 1):+.0f}% "
                f"against the busy task's; {hedges} hedges ({100 * hedges / len(quiet):.1f}%), "
                f"not sent: {skipped}")),
    ]


# ---------------------------------------------------------------------- main


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


SCENARIOS = ("faults", "overload", "hedging", "quiet-hedging")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply request counts")
    parser.add_argument("--seed", type=seed_number, default=7)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)")
    args = parser.parse_args()
    chosen = set(args.scenarios.split(","))
    if not chosen <= set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(chosen - set(SCENARIOS)))}")

    def count(base: int) -> int:
        return max(10, int(base * args.scale))

    print(f"load average before: {load_average()} on {os.cpu_count()} CPUs")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        directory = Path(tmp)
        sim = start_simulator(directory, BENCH_MODELS, name="chaos-sim")
        counters = SimCounters(sim.base_url)
        try:
            if "faults" in chosen:
                with router(directory, sim, "matrix", MATRIX_DEPS, MATRIX_MODELS,
                            "    breaker:\n      cool_down_s: 2.0", MATRIX_POLICIES) as gw:
                    rows.append(five_xx(gw, counters, count(1500), 60.0, args.seed))
                    rows.append(hang(gw, sim, counters, count(150), 10.0, args.seed))
                    rows.append(throttled(gw, counters, count(300), 30.0, args.seed))
                    rows.append(cut_streams(gw, counters, count(400), 40.0, args.seed))
                    rows.append(duplicates(gw, counters))
            if "overload" in chosen:
                for queue, wait in ((0, 0.5), (4, 0.2)):
                    rows += overload(directory, sim, counters, queue, wait,
                                     10.0 * max(args.scale, 0.3), args.seed)
            if "hedging" in chosen:
                rows += hedging(directory, sim, counters, count(600), 30.0, args.seed)
            if "quiet-hedging" in chosen:
                rows += quiet_hedging(directory, sim, counters, max(90.0 * args.scale, 20.0),
                                      args.seed)
        finally:
            sim.stop()
    print_table(rows)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
