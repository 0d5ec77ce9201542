"""Soak: does slorouter's memory, file descriptors and connections level off under long mixed load?

    python -m bench.soak [--minutes 10] [--rate 25] [--config PATH] [--out DIR]
                         [--sample-s 20] [--idle-s 60] [--seed 7]

Why: a new litellm client per request used to grow the router's RSS by 4.2 MB per 1,000
requests at 25 req/s, with no plateau in sight; after the fix RSS levels off near 400 MB after
about 9,000 requests. A short benchmark cannot tell a leak from a warm-up; this run is long
enough to, and repeatable (seeded arrivals and request kinds).

What it does: starts the provider simulator (its built-in models) and slorouter on the embedded
simulator default (`policies/defaults/simulator.yaml`, or `--config`, which must serve the
models `auto`, `fast`, `balanced`, `large` from `${SLOROUTER_SIM_BASE}`) the way `bench/suite.py`
does, then sends open-loop Poisson arrivals at `--rate` for `--minutes`: streamed and whole
answers, temperature-0 repeats (cache hits), clients that cancel mid-stream and before the first
token, tiny `x-slorouter-timeout-ms`, `Idempotency-Key` requests and a few bad requests (4xx).
For a fixed share of the run each, the simulator's control API makes `sim-fast` answer 5xx,
`sim-balanced` cut streams and `sim-large` slow, then restores them. Every `--sample-s` it reads
the router's process group from /proc: RSS, open fds, threads, established TCP connections,
with the requests sent so far; after the load it idles `--idle-s` and samples once more.

It prints the samples and a summary: RSS growth in MB per 1,000 requests (OLS slope of RSS on
requests sent) over the whole run and over its second half (a plateau shows as a second-half
slope near 0), peak fds and connections and whether they came back near the starting level at
idle, and the load's outcomes by class. Exit 0 when the load ran, 1 when it did not, 2 when the
router or simulator did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from bench.procstat import (
    established_inodes,
    group_pids,
    group_rss_mb,
    open_fds,
    socket_inodes,
    threads,
)
from bench.suite import start
from router.cli_types import positive_number, seed_number
from router.loadtest.loadgen import poisson_schedule
from router.providers.simulator.client import SimulatorControl
from router.providers.simulator.profile import fields_to_restore
from tests.support.procs import ManagedProcess

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED_SIMULATOR_DEFAULT = ROOT / "policies" / "defaults" / "simulator.yaml"
DRAIN_TIMEOUT_S = 45.0  # how long in-flight requests may finish once the arrivals stop
REQUEST_TIMEOUT_S = 40.0
# Returned near the start at idle: within this many of it, or this share of the peak's rise
# (upstream connection pools may keep a few keep-alive connections, and their fds, open).
BASELINE_SLACK = 10
BASELINE_SHARE_OF_RISE = 0.25

# Request kinds and their shares of the arrivals.
KIND_WEIGHTS: dict[str, float] = {
    "stream": 0.22, "whole": 0.20, "repeat": 0.15, "cancel_mid_stream": 0.08,
    "cancel_before_first_token": 0.08, "tiny_timeout": 0.09, "idempotent": 0.10, "bad": 0.08,
}
OK_CLASSES = frozenset({"200", "200_cache_hit", "cancelled"})
WORDS = ("router", "cache", "stream", "token", "latency", "budget", "queue", "python", "async",
         "socket", "memory", "model", "haiku")
REPEATED_PROMPTS = [f"Summarize note {i} about {WORDS[i % len(WORDS)]}." for i in range(25)]
BAD_BODIES = (b"{not json", b'{"model": "auto"}',
              b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}',
              b'{"model": "auto", "messages": [{"role": "user", "content": "x"}], '
              b'"max_tokens": -3}',
              b'{"model": "auto", "messages": "not a list"}')


@dataclass(frozen=True)
class Fault:
    """Simulator `model` runs with `changes` from `start_share` of the run for `share` of it."""

    label: str
    model: str
    changes: dict[str, float]
    start_share: float
    share: float = 0.1


FAULTS = (
    Fault("5xx", "sim-fast", {"error_rate_500": 0.5, "error_rate_503": 0.1}, 0.2),
    Fault("cut streams", "sim-balanced", {"cut_rate": 0.3}, 0.45),
    Fault("slow", "sim-large", {"ttft_p50_ms": 5000, "ttft_p99_ms": 9000}, 0.7),
)


@dataclass(frozen=True)
class Sample:
    """One reading of the router's process group."""

    at_s: float
    phase: str  # start | load | end | idle
    sent: int
    rss_mb: float
    fds: int
    threads: int
    connections: int


@dataclass(frozen=True)
class PlannedCall:
    """One request of the mix and how its client behaves."""

    kind: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False
    cancel_after_chunks: int | None = None
    cancel_after_s: float | None = None


@dataclass
class Tally:
    sent: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)  # "kind:class"


# --- summary maths (pure) ---------------------------------------------------------------------

def ols_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys on xs; None with fewer than two distinct xs."""
    if len(set(xs)) < 2:
        return None
    return statistics.linear_regression(xs, ys).slope


def load_samples(samples: Sequence[Sample]) -> list[Sample]:
    """The samples taken before and during the load (not the one after idling)."""
    return [s for s in samples if s.phase != "idle"]


def rss_growth_per_1k(samples: Sequence[Sample]) -> float | None:
    """RSS growth (MB per 1,000 requests sent) over the whole load."""
    during = load_samples(samples)
    slope = ols_slope([s.sent for s in during], [s.rss_mb for s in during])
    return None if slope is None else slope * 1000


def second_half_rss_growth_per_1k(samples: Sequence[Sample]) -> float | None:
    """RSS growth (MB per 1,000 requests) over the samples from half the requests sent on."""
    during = load_samples(samples)
    if not during:
        return None
    half = max(s.sent for s in during) / 2
    return rss_growth_per_1k([s for s in during if s.sent >= half])


def returned_to_baseline(start: float, peak: float, idle: float,
                         slack: float = BASELINE_SLACK,
                         share_of_rise: float = BASELINE_SHARE_OF_RISE) -> bool:
    """Whether `idle` came back near `start`: within `slack` of it, or within `share_of_rise`
    of the rise to `peak`, whichever is larger."""
    return idle - start <= max(slack, share_of_rise * (peak - start))


def outcome_class(outcome: str) -> str:
    return outcome.split(":", 1)[1]


def errors_by_class(outcomes: Counter[str]) -> dict[str, int]:
    """Counts of every outcome class that is not a success or a deliberate cancel."""
    errors: Counter[str] = Counter()
    for outcome, count in outcomes.items():
        if outcome_class(outcome) not in OK_CLASSES:
            errors[outcome_class(outcome)] += count
    return dict(sorted(errors.items(), key=lambda item: -item[1]))


def format_number(value: float | None, spec: str = "+.2f") -> str:
    return "-" if value is None else format(value, spec)


def format_samples(samples: Sequence[Sample]) -> str:
    lines = [f"{'t_s':>6} {'phase':<6}{'sent':>8}{'rss_mb':>9}{'fds':>6}{'threads':>8}"
             f"{'conns':>7}"]
    lines += [f"{s.at_s:>6.0f} {s.phase:<6}{s.sent:>8}{s.rss_mb:>9.1f}{s.fds:>6}{s.threads:>8}"
              f"{s.connections:>7}" for s in samples]
    return "\n".join(lines)


def level_line(name: str, values: Sequence[int], idle: int) -> str:
    start, peak = values[0], max(values)
    back = "yes" if returned_to_baseline(start, peak, idle) else "NO"
    return f"{name}: start {start}, peak {peak}, after idle {idle}; returned near start: {back}"


def summary_lines(samples: Sequence[Sample], tally: Tally, minutes: float, rate: float,
                  fault_log: Sequence[str]) -> list[str]:
    """The summary printed after the samples (and written to summary.json)."""
    during, last = load_samples(samples), samples[-1]
    rss = [s.rss_mb for s in samples]
    errors = errors_by_class(tally.outcomes)
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(tally.outcomes.items()))
    return [
        f"requests sent: {tally.sent} in {minutes:g} min at {rate:g} req/s asked",
        f"rss MB: start {rss[0]:.1f}, peak {max(rss):.1f}, end of load {during[-1].rss_mb:.1f}, "
        f"after idle {last.rss_mb:.1f}",
        f"rss growth MB per 1000 requests: whole run {format_number(rss_growth_per_1k(samples))}"
        f", second half {format_number(second_half_rss_growth_per_1k(samples))}",
        level_line("fds", [s.fds for s in during], last.fds),
        level_line("connections", [s.connections for s in during], last.connections),
        f"threads: start {samples[0].threads}, peak {max(s.threads for s in samples)}, "
        f"after idle {last.threads}",
        "errors by class: " + (", ".join(f"{c} {n}" for c, n in errors.items()) or "none")
        + " (bad requests' 4xx and tiny timeouts' 504 are expected)",
        f"outcomes by kind: {kinds}",
        f"faults: {'; '.join(fault_log) or 'none'}",
    ]


# --- the router's process group, from /proc -----------------------------------------------------

def read_sample(pgid: int, phase: str, sent: int, at_s: float) -> Sample:
    pids = group_pids(pgid)
    established = established_inodes(pgid)
    return Sample(at_s=at_s, phase=phase, sent=sent, rss_mb=group_rss_mb(pgid),
                  fds=sum(open_fds(pid) for pid in pids),
                  threads=sum(len(threads(pid)) for pid in pids),
                  connections=sum(len(socket_inodes(pid) & established) for pid in pids))


# --- the mixed load -----------------------------------------------------------------------------

def chat_body(rng: random.Random, **fields: Any) -> bytes:
    words = " ".join(rng.choices(WORDS, k=rng.randint(3, 25)))
    body = {"model": rng.choice(["auto"] * 6 + ["fast", "balanced", "large"]),
            "messages": [{"role": "user", "content": f"{words} #{rng.randrange(10**9)}"}],
            "max_tokens": rng.choice([16, 32, 64, 96]), **fields}
    return orjson.dumps(body)


def plan_call(kind: str, rng: random.Random, idempotency_keys: Sequence[str]) -> PlannedCall:
    """The request of `kind` (one of KIND_WEIGHTS), drawn from `rng`."""
    if kind == "stream":
        return PlannedCall(kind, chat_body(rng, stream=True), stream=True)
    if kind == "whole":
        return PlannedCall(kind, chat_body(rng))
    if kind == "repeat":  # the same few prompts at temperature 0: cache hits after the first
        stream = rng.random() < 0.4
        body = {"model": "auto", "temperature": 0, "max_tokens": 32, "stream": stream,
                "messages": [{"role": "user", "content": rng.choice(REPEATED_PROMPTS)}]}
        return PlannedCall(kind, orjson.dumps(body), stream=stream)
    if kind == "cancel_mid_stream":
        return PlannedCall(kind, chat_body(rng, stream=True, max_tokens=200), stream=True,
                           cancel_after_chunks=rng.randint(2, 8))
    if kind == "cancel_before_first_token":  # well under every model's TTFT
        stream = rng.random() < 0.5
        return PlannedCall(kind, chat_body(rng, stream=stream), stream=stream,
                           cancel_after_s=rng.uniform(0.02, 0.25))
    if kind == "tiny_timeout":
        return PlannedCall(kind, chat_body(rng), headers={
            "x-slorouter-timeout-ms": str(rng.choice([1, 20, 100, 300]))})
    if kind == "idempotent":  # half reuse a key (with its body), half are new
        key = rng.choice(idempotency_keys) if rng.random() < 0.5 else f"u-{uuid.uuid4().hex}"
        body = {"model": "fast", "max_tokens": 16,
                "messages": [{"role": "user", "content": f"idempotent {key}"}]}
        return PlannedCall(kind, orjson.dumps(body), headers={"Idempotency-Key": key})
    if kind == "bad":
        return PlannedCall(kind, rng.choice(BAD_BODIES))
    raise ValueError(f"unknown request kind {kind!r}")


async def read_stream(response: httpx.Response, cancel_after_chunks: int | None) -> str:
    """The class of a streamed answer: 200 (to `[DONE]`), cancelled, stream_error or
    stream_incomplete."""
    chunks, errored = 0, False
    async for line in response.aiter_lines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            return "stream_error" if errored else "200"
        errored = errored or line.startswith('data: {"error"')
        chunks += 1
        if cancel_after_chunks is not None and chunks >= cancel_after_chunks:
            return "cancelled"
    return "stream_error" if errored else "stream_incomplete"


async def exchange(client: httpx.AsyncClient, call: PlannedCall) -> str:
    """Send `call`; the class of what came back."""
    headers = {"content-type": "application/json", **call.headers}
    if not call.stream:
        response = await client.post("/v1/chat/completions", content=call.body, headers=headers)
        if response.status_code == 200 and response.headers.get("x-slorouter-cache") == "hit":
            return "200_cache_hit"
        return "200" if response.status_code == 200 else f"http_{response.status_code}"
    async with client.stream("POST", "/v1/chat/completions", content=call.body,
                             headers=headers) as response:
        if response.status_code != 200:
            await response.aread()
            return f"http_{response.status_code}"
        return await read_stream(response, call.cancel_after_chunks)


async def send(client: httpx.AsyncClient, call: PlannedCall, tally: Tally) -> None:
    try:
        if call.cancel_after_s is None:
            outcome = await exchange(client, call)
        else:
            async with asyncio.timeout(call.cancel_after_s):
                outcome = await exchange(client, call)
    except TimeoutError:
        outcome = "cancelled" if call.cancel_after_s is not None else "client_timeout"
    except httpx.TimeoutException:
        outcome = "client_timeout"
    except httpx.HTTPError as exc:
        outcome = type(exc).__name__
    tally.outcomes[f"{call.kind}:{outcome}"] += 1


async def drive_load(base_url: str, rate: float, duration_s: float, seed: int,
                     tally: Tally) -> None:
    """Open-loop: each request its own task at its Poisson arrival; then wait for the rest."""
    rng = random.Random(seed)
    keys = [f"idem-{seed}-{i}" for i in range(40)]
    kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=base_url, limits=limits,
                                 timeout=REQUEST_TIMEOUT_S) as client:
        tasks: set[asyncio.Task[None]] = set()
        origin = time.monotonic()
        for at in poisson_schedule(rate, duration_s, seed):
            await asyncio.sleep(max(0.0, origin + float(at) - time.monotonic()))
            call = plan_call(rng.choices(kinds, weights)[0], rng, keys)
            task = asyncio.create_task(send(client, call, tally))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            tally.sent += 1
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=DRAIN_TIMEOUT_S)
            for task in late:
                task.cancel()
            if late:
                tally.outcomes["any:abandoned_at_drain"] += len(late)


async def run_faults(control: SimulatorControl, duration_s: float, fault_log: list[str]) -> None:
    """Each fault of FAULTS in its window of the run, then its model's fields restored."""
    origin = time.monotonic()
    profiles = (await asyncio.to_thread(control.profiles))["models"]
    for fault in FAULTS:
        original = fields_to_restore(profiles[fault.model], fault.changes)
        await asyncio.sleep(max(0.0, origin + fault.start_share * duration_s
                                - time.monotonic()))
        await asyncio.to_thread(control.set_profile, fault.model, fault.changes)
        began = time.monotonic() - origin
        try:
            await asyncio.sleep(fault.share * duration_s)
        finally:
            await asyncio.to_thread(control.set_profile, fault.model, original)
        fault_log.append(f"{fault.label} on {fault.model} {began:.0f}-"
                         f"{time.monotonic() - origin:.0f} s")


async def sample_during(pgid: int, tally: Tally, interval_s: float, origin: float,
                        samples: list[Sample]) -> None:
    """A sample every `interval_s` until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        samples.append(read_sample(pgid, "load", tally.sent, time.monotonic() - origin))


# --- the run ------------------------------------------------------------------------------------

async def soak(router: ManagedProcess, sim_base: str, args: argparse.Namespace
               ) -> tuple[list[Sample], Tally, list[str]]:
    """The load, the faults and the samples; then the idle sample."""
    tally, fault_log = Tally(), list[str]()
    duration_s = args.minutes * 60
    origin = time.monotonic()
    samples = [read_sample(router.pid, "start", 0, 0.0)]
    sampler = asyncio.create_task(sample_during(router.pid, tally, args.sample_s, origin,
                                                samples))
    with SimulatorControl(sim_base) as control:
        faults = asyncio.create_task(run_faults(control, duration_s, fault_log))
        try:
            await drive_load(f"http://127.0.0.1:{router.port}", args.rate, duration_s,
                             args.seed, tally)
        finally:
            sampler.cancel()
            faults.cancel()
            await asyncio.gather(sampler, faults, return_exceptions=True)
            control.reset(stats=False, prefix_cache=False)  # every model back to its profile
    samples.append(read_sample(router.pid, "end", tally.sent, time.monotonic() - origin))
    await asyncio.sleep(args.idle_s)
    samples.append(read_sample(router.pid, "idle", tally.sent, time.monotonic() - origin))
    return samples, tally, fault_log


def write_results(out: Path, samples: Sequence[Sample], summary: Sequence[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "samples.json").write_bytes(orjson.dumps([dataclasses.asdict(s) for s in samples],
                                                    option=orjson.OPT_INDENT_2))
    (out / "summary.txt").write_text("\n".join(summary) + "\n")


async def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            (sim, router), _ = start(Path(tmp), args.config, sim_profile=None)
        except (RuntimeError, TimeoutError) as exc:  # the process's own words: its log's tail
            print(f"bench.soak: {exc}", file=sys.stderr)
            return 2
        try:
            print(f"soak: {args.minutes:g} min at {args.rate:g} req/s, a sample every "
                  f"{args.sample_s:g} s, then {args.idle_s:g} s idle; router pid {router.pid}",
                  flush=True)
            samples, tally, fault_log = await soak(router, f"http://127.0.0.1:{sim.port}", args)
        finally:
            router.stop()
            sim.stop()
    summary = summary_lines(samples, tally, args.minutes, args.rate, fault_log)
    print(format_samples(samples))
    print("\n".join(summary))
    write_results(args.out, samples, summary)
    return 0 if tally.sent > 0 and len(load_samples(samples)) >= 2 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--minutes", type=positive_number, default=10.0)
    parser.add_argument("--rate", type=positive_number, default=25.0, help="requests per second")
    parser.add_argument("--config", type=Path, default=EMBEDDED_SIMULATOR_DEFAULT)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "soak")
    parser.add_argument("--sample-s", type=positive_number, default=20.0,
                        help="seconds between samples during the load")
    parser.add_argument("--idle-s", type=float, default=60.0,
                        help="seconds of idling after the load before the last sample")
    parser.add_argument("--seed", type=seed_number, default=7)
    raise SystemExit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
