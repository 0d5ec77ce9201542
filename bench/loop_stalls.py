"""Event-loop responsiveness while classifying long prompts.

    python -m bench.loop_stalls [--rate 20] [--duration 15] [--tokens 4000] [--offload-chars N]

Starts the simulator and slorouter, sends `auto` requests whose prompts are about `--tokens`
tokens (so the classifier reads long text) at an open-loop rate, beside a run with 10-token
prompts, and measures responsiveness two ways:

* **probe**: `GET /healthz` every 10 ms from this process. Its latency bounds the longest stall
  but also holds this process's own delays (it runs the load generator too) and the kernel's.
* **loop lag**, measured inside the router: the router runs with a monitor task that sleeps
  1 ms at a time and records how late it wakes (each lateness is a stall of the loop). For every
  stall over 5 ms it also records how much CPU the loop thread used during it (a stall with
  little CPU is the process waiting for a core, not code holding the loop) and what ran during
  it: garbage collection (with its generation), `ChatPipeline.prepare` (classify + decide) and
  the classifier alone, and the request parsing (`orjson.loads`, `parse_chat`).

The machine has 2 cores shared by the router, the simulator and this load generator, so
stalls without CPU (preemption) are expected; the ones to fix are those the loop spent busy.

**The machine's own stalls, side by side.** On a virtual machine the hypervisor can take the
core away from a running thread for several milliseconds, and the guest counts that time as the
thread's CPU time (no steal is reported), so a "busy" stall may be nobody's code. Before the
scenarios, on the router's core(s), a bare process with no router code runs the same monitor in
an idle asyncio loop for `--duration` (the `idle` line: late wake-ups of an idle core), then pure
Python work for 5 s, counting chunks that took over 5 ms longer than the median (losses per
busy second). Each scenario line is followed by the stalls that rate predicts for the router's
busy time (its CPU time over the scenario, the probe's `/healthz` requests included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench.loadgen import run_open_loop
from bench.machine import core_losses, iterations_per_ms
from bench.procstat import pin, place_apart, process_cpu_s, share_all
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
STALL_S = 0.005
TICK_S = 0.001
BURN_MS = 0.5  # the machine baseline's unit of work


# --- inside the router process -------------------------------------------------------------


class _Recorder:
    """Loop lateness, and the intervals of what ran on the loop thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lags: list[float] = []
        self.stalls: list[tuple[float, float, float]] = []  # (start, end, loop-thread CPU s)
        self.events: list[tuple[str, float, float]] = []  # (what, start, end)
        self._gc_start = 0.0

    def event(self, what: str, start: float, end: float) -> None:
        if end - start >= 0.0002:
            self.events.append((what, start, end))

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._gc_start = now
        else:
            self.event(f"gc{info['generation']}", self._gc_start, now)

    async def monitor(self) -> None:
        last_dump = time.perf_counter()
        while True:
            start, cpu = time.perf_counter(), time.thread_time()
            await asyncio.sleep(TICK_S)
            end = time.perf_counter()
            lag = max(0.0, end - start - TICK_S)
            self.lags.append(lag)
            if lag >= STALL_S:
                self.stalls.append((start + TICK_S, end, time.thread_time() - cpu))
            if end - last_dump > 0.5:
                last_dump = end
                self.dump()

    def dump(self) -> None:
        self.path.write_text(json.dumps({"lags": self.lags, "stalls": self.stalls,
                                         "events": self.events}))


def _timed(recorder: _Recorder, what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            recorder.event(what, start, time.perf_counter())

    return wrapper


def serve_instrumented(stats: Path, offload_chars: int | None, argv: Sequence[str]) -> int:
    """Run `slorouter <argv>` with the loop monitor, GC callbacks and timed request steps
    (and `OFFLOAD_PROMPT_CHARS` set to `offload_chars` when given)."""
    import uvicorn

    from router import cli, pipeline
    from router.api import body, chat
    from router.classify.classifier import LinearClassifier

    if offload_chars is not None:
        chat.OFFLOAD_PROMPT_CHARS = offload_chars
    recorder = _Recorder(stats)
    gc.callbacks.append(recorder.on_gc)
    pipeline.ChatPipeline.prepare = _timed(  # type: ignore[method-assign]
        recorder, "prepare", pipeline.ChatPipeline.prepare)
    LinearClassifier.classify = _timed(  # type: ignore[method-assign]
        recorder, "classify", LinearClassifier.classify)
    # The name the handler looks up at call time: chat.py imports it from `router.api.body`
    # without re-exporting it, so it is set in chat's namespace, not as an attribute.
    vars(chat)["parse_chat"] = _timed(recorder, "parse_chat", body.parse_chat)
    chat.orjson = _TimedJson(recorder)  # type: ignore[assignment,attr-defined]
    serve = uvicorn.Server.serve

    async def serve_with_monitor(self: uvicorn.Server, sockets: Any = None) -> None:
        task = asyncio.create_task(recorder.monitor())
        try:
            await serve(self, sockets)
        finally:
            task.cancel()
            recorder.dump()

    uvicorn.Server.serve = serve_with_monitor  # type: ignore[method-assign]
    return cli.main(list(argv))


class _TimedJson:
    """`orjson` for `router.api.chat`, with `loads` (the body parse) timed."""

    def __init__(self, recorder: _Recorder) -> None:
        import orjson

        self._orjson = orjson
        self.JSONDecodeError = orjson.JSONDecodeError
        self.loads = _timed(recorder, "json_loads", orjson.loads)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._orjson, name)


# --- the machine alone: what the core does to a loop with no router code ---------------------


def machine_baseline(stats: Path, duration: float) -> int:
    """The `_Recorder` monitor in a bare, idle asyncio loop for `duration`, then pure Python work
    for 5 s: the machine's stalls while idle, and its core losses per busy second."""
    recorder = _Recorder(stats)

    async def idle() -> None:
        monitor = asyncio.create_task(recorder.monitor())
        await asyncio.sleep(duration)
        monitor.cancel()

    gc.disable()
    asyncio.run(idle())
    losses, busy_s = core_losses(5.0, iterations_per_ms())
    stats.write_text(json.dumps({"lags": recorder.lags, "stalls": recorder.stalls, "events": [],
                                 "losses_per_busy_s": losses / busy_s}))
    return 0


def run_machine_baseline(cpus: set[int], work: Path, duration: float) -> dict[str, Any]:
    stats = work / "machine.json"
    proc = subprocess.Popen([PYTHON, "-m", "bench.loop_stalls", "--machine-baseline", str(stats),
                             str(duration)])
    pin([proc.pid], cpus)
    proc.wait(timeout=duration + 60)
    return _read(stats)


# --- the load generator and the probe -------------------------------------------------------


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
    payload: dict[str, object] = {"model": "auto",
                                  "messages": [{"role": "user", "content": prompt}]}
    stop = asyncio.Event()
    prober = asyncio.create_task(probe(f"{base}/healthz", stop))
    await run_open_loop("load", f"{base}/v1/chat/completions", payload, rate, duration)
    stop.set()
    return await prober


def _read(stats: Path) -> dict[str, Any]:
    for _ in range(20):
        with contextlib.suppress(OSError, ValueError):
            data: dict[str, Any] = json.loads(stats.read_text())
            return data
        time.sleep(0.05)
    return {"lags": [], "stalls": [], "events": []}


def _attribute(stalls: list[list[float]], events: list[list[Any]]) -> dict[str, int]:
    """How many stalls overlap each kind of event (a stall may count under several)."""
    out: dict[str, int] = {}
    for start, end, _cpu in stalls:
        kinds = {what for what, s, e in events if s < end and e > start} or {"nothing timed"}
        for kind in kinds:
            out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))


def _lag_columns(data: dict[str, Any], before: dict[str, Any]) -> tuple[str, list[Any]]:
    lags = np.array(data["lags"][len(before["lags"]):] or [0.0]) * 1e3
    stalls = data["stalls"][len(before["stalls"]):]
    busy = [s for s in stalls if s[2] >= 0.5 * (s[1] - s[0])]
    return (f"{np.percentile(lags, 50):>8.2f}{np.percentile(lags, 99):>8.2f}{lags.max():>8.2f}"
            f"{len(stalls):>8}{len(busy):>6}", stalls)


def _report(tokens: int, delays: list[float], before: dict[str, Any],
            after: dict[str, Any]) -> None:
    ms = np.array(delays) * 1e3
    columns, stalls = _lag_columns(after, before)
    events = after["events"][len(before["events"]):]
    busy = [s for s in stalls if s[2] >= 0.5 * (s[1] - s[0])]
    print(f"{tokens:>7} {len(ms):>7}{np.percentile(ms, 50):>8.2f}{np.percentile(ms, 99):>8.2f}"
          f"{ms.max():>8.2f}  {columns}")
    for label, chosen in (("all", stalls), ("busy", busy)):
        if chosen:
            print(f"{'':>9}stalls > {STALL_S * 1e3:.0f} ms ({label}) overlap: "
                  f"{_attribute(chosen, events)}")
    kinds = sorted({e[0] for e in events})
    for kind in kinds:
        d = np.array([e[2] - e[1] for e in events if e[0] == kind]) * 1e3
        print(f"{'':>9}{kind:<11} n={len(d):<5} p50 {np.percentile(d, 50):6.2f} ms  "
              f"p99 {np.percentile(d, 99):6.2f} ms  max {d.max():6.2f} ms  (timed when >= 0.2 ms)")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--machine-baseline":
        sys.exit(machine_baseline(Path(sys.argv[2]), float(sys.argv[3])))
    if len(sys.argv) > 3 and sys.argv[1] == "--serve-instrumented":
        offload = None if sys.argv[3] == "default" else int(sys.argv[3])
        sys.exit(serve_instrumented(Path(sys.argv[2]), offload, sys.argv[4:]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--placement", choices=("apart", "shared"), default="apart",
                        help="apart: slorouter on its own core; shared: all on every core")
    parser.add_argument("--offload-chars", type=int, default=None,
                        help="classify prompts longer than this in a worker thread "
                             "(default: the service's OFFLOAD_PROMPT_CHARS)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stats = work / "loop.json"
        (work / "p.json").write_text(json.dumps(PROFILE))
        sim_port, port = free_port(), free_port()
        sim = ManagedProcess([PYTHON, "-m", "router.cli", "sim", "--port", str(sim_port),
                              "--profile", str(work / "p.json")], sim_port).start()
        (work / "c.yaml").write_text(CONFIG.format(base=f"http://127.0.0.1:{sim_port}"))
        offload_arg = "default" if args.offload_chars is None else str(args.offload_chars)
        router = ManagedProcess([PYTHON, "-m", "bench.loop_stalls", "--serve-instrumented",
                                 str(stats), offload_arg, "serve", "--config", str(work / "c.yaml"),
                                 "--port", str(port), "--log-level", "warning"], port,
                                ready_url=f"http://127.0.0.1:{port}/healthz",
                                startup_timeout_s=60, log_path=work / "router.log").start()
        try:
            pids = [os.getpid(), sim.pid]
            print(place_apart(pids, [router.pid]) if args.placement == "apart"
                  else share_all([*pids, router.pid]))
            print(f"{'':>15}{'probe (client side)':^24}  {'loop lag (in the router)':^40}")
            print(f"{'tokens':>7} {'probes':>7}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}  "
                  f"{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}{'>5ms':>8}{'busy':>6}")
            machine = run_machine_baseline(os.sched_getaffinity(router.pid), work,
                                           args.duration)
            columns, _ = _lag_columns(machine, {"lags": [], "stalls": []})
            losses = machine["losses_per_busy_s"]
            print(f"{'idle':>7} {'-':>7}{'-':>8}{'-':>8}{'-':>8}  {columns}   (the machine: a "
                  f"bare idle loop on the router's core)")
            for tokens in (10, args.tokens):
                time.sleep(1.0)
                before = _read(stats)
                cpu_before = process_cpu_s(router.pid)
                delays = asyncio.run(scenario(f"http://127.0.0.1:{port}", tokens, args.rate,
                                              args.duration))
                busy_s = process_cpu_s(router.pid) - cpu_before
                time.sleep(1.0)
                _report(tokens, delays, before, _read(stats))
                print(f"{'':>9}the machine alone: a busy loop on this core loses it for > "
                      f"{STALL_S * 1e3:.0f} ms {losses:.1f} times per busy second; the router "
                      f"was busy {busy_s:.2f} s -> about {losses * busy_s:.0f} such stalls "
                      f"expected, plus the idle line's")
        finally:
            router.stop()
            sim.stop()


if __name__ == "__main__":
    main()
