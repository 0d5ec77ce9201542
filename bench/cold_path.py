"""What a request costs when requests come far apart, phase by phase, beside back-to-back.

    python -m bench.cold_path [--targets slorouter-full,slorouter-minimal] [--gaps 0,200]
                              [--requests 150] [--stream]

Issue 8's CPU budget (1.5 ms per request) is missed only at low rates: on a 2-core VM the same
request costs ~2.7x more CPU at 5 req/s than at 200 req/s, because between requests the
caches lose the router's code and data (`bench.stack_floor` shows the bare server and client
paying the same). This benchmark finds where that cost lands, in about a minute instead of
`bench.vs_litellm`'s twenty: it builds slorouter in this process from the side-by-side
benchmark's config (`bench/configs/`, telemetry as there), starts the provider simulator on
the other core, and sends requests one at a time straight into the ASGI app (no HTTP server,
no load generator in this process), sleeping `gap` ms before each. Per request it reads this
thread's CPU time (CLOCK_THREAD_CPUTIME_ID: user and kernel, cache misses included), and per
phase the CPU time spent inside a handful of the router's own functions. Gap 0 is the
baseline (warm); a gap of 200 ms is what each request sees at 5 req/s.

A phase that awaits (the upstream call) also counts what other tasks ran on the loop while it
waited: the statistics refresher, which runs on the wake-up that a recorded answer causes.
The phases overlap (an indented phase is part of the one above it); `whole request` holds them
all.

Two more rows are the request's critical path, what its client waits for: the CPU time from the
request's arrival to the upstream request's write, and from the upstream answer's head (parsed)
to the first body bytes sent to the client that carry content (a stream's first token; a
stream's role chunk, which has none, does not end it). Everything else (statistics, telemetry)
runs after the answer is on its way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import uvloop

from bench.procstat import pin, split_cores
from bench.vs_litellm import (
    CONFIGS,
    PROMPT,
    TARGETS,
    start_bench_simulator,
    start_otlp_sink,
    telemetry_env,
)
from router.loadtest.loadgen import CONTENT

# (label, module, attribute path): functions whose CPU time is a phase of the request.
PHASES: tuple[tuple[str, str, str], ...] = (
    ("authenticate", "router.api.chat", "authenticate"),
    ("read the body", "router.api.chat", "read_json"),
    ("validate the body", "router.api.chat", "parse_chat"),
    ("prepare (classify + decide)", "router.pipeline", "ChatPipeline.prepare"),
    ("  classify", "router.classify.classifier", "LinearClassifier.classify"),
    ("  decide", "router.pipeline", "decide"),
    ("cache plan (rule, scope, key)", "router.caching", "ResultCaching.plan"),
    ("cache lookup", "router.caching", "ResultCaching.lookup"),
    ("upstream call (runner, client)", "router.execution.runner", "Runner.complete"),
    ("  upstream write (system call)", "router.providers.http1", "_Connection.send"),
    ("stream opened (first token)", "router.execution.runner", "Runner.open_stream"),
    ("record the outcome (every sink)", "router.outcomes", "FanOut.record"),
    ("  statistics and SLO", "router.feedback", "StatsSink.record"),
    ("statistics refresh", "router.stats.store", "LocalStatsStore.refresh"),
    ("SLO refresh", "router.slo.tracker", "SloTracker.refresh"),
    ("telemetry (metrics, spans)", "router.telemetry.sink", "TelemetrySink._process"),
)
WHOLE = "whole request"
TO_UPSTREAM = "arrival to upstream write"
TO_CLIENT = "upstream answer to client"
LABEL_WIDTH = 40  # the table's first column


@dataclass
class CriticalPath:
    """This thread's CPU clock at the request's milestones (the first of each, per request)."""

    marks: dict[str, int] = field(default_factory=dict)
    to_upstream_us: list[float] = field(default_factory=list)
    to_client_us: list[float] = field(default_factory=list)

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.thread_time_ns())

    def close_request(self) -> None:
        """File the request's two spans (when its milestones were all seen) and start anew."""
        m, self.marks = self.marks, {}
        if {"arrived", "sent", "answered", "client"} <= m.keys():
            self.to_upstream_us.append((m["sent"] - m["arrived"]) / 1e3)
            self.to_client_us.append((m["client"] - m["answered"]) / 1e3)


@contextlib.contextmanager
def upstream_marked(path: CriticalPath) -> Iterator[None]:
    """Mark the pass-through client's first write of each request, and its first wake-up by the
    answer (its head parsed: the event loop's callbacks into the connection are bound when it
    opens, so the marks sit on the exchange the connection wakes)."""
    from router.providers import http1

    connection, exchange = http1._Connection, http1._Exchange
    send, wake = connection.send, exchange.wake

    def marked_send(self: Any, head: bytes, body: bytes) -> Any:
        path.mark("sent")
        return send(self, head, body)

    def marked_wake(self: Any) -> None:
        path.mark("answered")
        wake(self)

    connection.send, exchange.wake = marked_send, marked_wake  # type: ignore[method-assign]
    try:
        yield
    finally:
        connection.send, exchange.wake = send, wake  # type: ignore[method-assign]


@dataclass
class PhaseTimes:
    """CPU nanoseconds per phase, summed over the requests of one run."""

    ns: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def timed(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        ns = self.ns
        if asyncio.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                start = time.thread_time_ns()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    ns[label] += time.thread_time_ns() - start
            return timed_async

        @functools.wraps(fn)
        def timed_sync(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                ns[label] += time.thread_time_ns() - start
        return timed_sync


@contextlib.contextmanager
def phases_timed(times: PhaseTimes) -> Iterator[None]:
    """Time every function of `PHASES` into `times` (the original ones are back on exit)."""
    restore: list[tuple[Any, str, Any]] = []
    try:
        for label, module, path in PHASES:
            owner: Any = importlib.import_module(module)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            restore.append((owner, name, original))
            setattr(owner, name, times.timed(label, original))
        yield
    finally:
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


class InProcessRouter:
    """slorouter built from a benchmark target's config, driven through ASGI in this process."""

    def __init__(self, app: Any, model: str, api_key: str | None, stream: bool) -> None:
        self._app = app
        payload: dict[str, Any] = {"model": model, "max_tokens": 16, "temperature": 0.7,
                                   "messages": [{"role": "user", "content": PROMPT}]}
        if stream:
            payload.update(stream=True, stream_options={"include_usage": True})
        self._body = orjson.dumps(payload)
        headers = [(b"host", b"localhost"), (b"content-type", b"application/json"),
                   (b"content-length", str(len(self._body)).encode())]
        if api_key is not None:
            headers.append((b"authorization", f"Bearer {api_key}".encode()))
        self._headers = headers
        self._lifespan: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._lifespan_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        started = asyncio.get_running_loop().create_future()

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set_result(None)

        self._lifespan.put_nowait({"type": "lifespan.startup"})
        self._lifespan_task = asyncio.create_task(self._app(
            {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, self._lifespan.get,
            send))
        await started

    async def stop(self) -> None:
        self._lifespan.put_nowait({"type": "lifespan.shutdown"})
        if self._lifespan_task is not None:
            await self._lifespan_task

    async def request(self, path: CriticalPath | None = None) -> int:
        """One chat completion, streamed or not, read to its end; its HTTP status. With `path`,
        its arrival and its first body bytes to the client with content are marked there."""
        body_sent = False
        never = asyncio.Event()
        status: list[int] = []

        async def receive() -> dict[str, Any]:
            nonlocal body_sent
            if not body_sent:
                body_sent = True
                return {"type": "http.request", "body": self._body, "more_body": False}
            await never.wait()  # the client stays connected
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif path is not None and CONTENT.search(message.get("body", b"")):
                path.mark("client")

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
                 "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                 "headers": self._headers, "client": ("127.0.0.1", 40000),
                 "server": ("127.0.0.1", 8000), "state": {}}
        if path is not None:
            path.mark("arrived")
        await self._app(scope, receive, send)
        return status[0]


def build_router(target: str, work: Path, sim_base: str, otlp: str,
                 stream: bool) -> InProcessRouter:
    """The target's config from `bench/configs/` as `bench.vs_litellm` serves it."""
    from policies.loader import load_config_file
    from router.wiring import build_from_config

    spec = TARGETS[target]
    if spec.kind != "slorouter" or spec.config is None:
        raise SystemExit(f"{target}: not a slorouter target")
    key = "sk-bench-" + secrets.token_urlsafe(24)
    values = {"SIM_BASE": sim_base, "BENCH_CACHE_DIR": str(work / "cache"),
              "BENCH_TENANT_KEY": key, "OTLP_ENDPOINT": otlp}
    environ = telemetry_env(spec, {**os.environ, **values})
    config = load_config_file(CONFIGS / spec.config, environ)
    app, _runtime = build_from_config(config, environ, CONFIGS)
    return InProcessRouter(app, spec.model, key if spec.authenticated else None, stream)


@dataclass
class GapResult:
    gap_ms: float
    request_us: list[float]
    phase_us: dict[str, float]  # mean CPU per request
    path: CriticalPath


async def measure(router: InProcessRouter, gap_ms: float, requests: int) -> GapResult:
    times = PhaseTimes()
    path = CriticalPath()
    per_request: list[float] = []
    with phases_timed(times), upstream_marked(path):
        for _ in range(requests):
            await asyncio.sleep(gap_ms / 1e3)
            start = time.thread_time_ns()
            status = await router.request(path)
            per_request.append((time.thread_time_ns() - start) / 1e3)
            path.close_request()
            if status != 200:
                raise RuntimeError(f"the router answered {status}")
    phases = {label: ns / 1e3 / requests for label, ns in times.ns.items()}
    return GapResult(gap_ms, per_request, phases, path)


def table(target: str, results: list[GapResult]) -> str:
    head = f"{target}: thread CPU per request (us)"
    cols = "".join(f"{f'gap {r.gap_ms:g} ms':>14}" for r in results)
    lines = [head, f"{'phase':<{LABEL_WIDTH}}{cols}"]
    lines.append(f"{WHOLE + ' (median)':<{LABEL_WIDTH}}"
                 + "".join(f"{statistics.median(r.request_us):>14.0f}" for r in results))
    lines.append(f"{WHOLE + ' (mean)':<{LABEL_WIDTH}}"
                 + "".join(f"{statistics.fmean(r.request_us):>14.0f}" for r in results))
    for label, spans in ((TO_UPSTREAM, [r.path.to_upstream_us for r in results]),
                         (TO_CLIENT, [r.path.to_client_us for r in results])):
        lines.append(f"{label + ' (median)':<{LABEL_WIDTH}}"
                     + "".join(f"{statistics.median(v):>14.0f}" if v else f"{'-':>14}"
                               for v in spans))
    for label, _, _ in PHASES:
        values = [r.phase_us.get(label) for r in results]
        if any(v is not None for v in values):
            lines.append(f"{label + ' (mean)':<{LABEL_WIDTH}}"
                         + "".join(f"{v:>14.0f}" if v is not None else f"{'-':>14}"
                                   for v in values))
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> None:
    sink, otlp = start_otlp_sink()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        sim, sim_base = start_bench_simulator(work)
        stack.callback(sim.stop)
        stack.callback(sink.shutdown)
        split = split_cores()
        target = args.targets[0]
        router = build_router(target, work, sim_base, otlp, args.stream)
        if split is not None:  # after building: the exporters' threads are pinned too
            pin([sim.pid], split[0])
            pin([os.getpid()], split[1])
        await router.start()
        try:
            for _ in range(args.warm_up):
                await router.request()
            results = [await measure(router, gap, args.requests) for gap in args.gaps]
        finally:
            await router.stop()
        print(table(f"{target}{', streaming' if args.stream else ''}", results), flush=True)
        placement = ("one core: nothing pinned" if split is None else
                     f"simulator on CPU {sorted(split[0])}, router on CPU {sorted(split[1])}")
        print(f"({placement}; {args.requests} requests per gap, one at a time)")


def each_in_its_own_process(args: argparse.Namespace) -> None:
    """One target per process: two routers built in one would share the process's caches,
    allocator and imported modules, so the second would be measured warmer than it runs."""
    for target in args.targets:
        subprocess.run([sys.executable, "-m", "bench.cold_path", "--targets", target,
                        "--gaps", ",".join(f"{g:g}" for g in args.gaps),
                        "--requests", str(args.requests), "--warm-up", str(args.warm_up),
                        *(["--stream"] if args.stream else [])],
                       check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--targets", type=lambda s: s.split(","),
                        default=["slorouter-full", "slorouter-minimal"],
                        help="configs from bench.vs_litellm (default: %(default)s)")
    parser.add_argument("--gaps", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.0, 200.0],
                        help="ms asleep before each request, comma-separated (default: 0,200)")
    parser.add_argument("--requests", type=int, default=150,
                        help="requests per gap (default: %(default)s)")
    parser.add_argument("--warm-up", type=int, default=50,
                        help="requests before measuring (default: %(default)s)")
    parser.add_argument("--stream", action="store_true",
                        help="streamed answers (SSE, usage included) instead of whole ones")
    args = parser.parse_args()
    if len(args.targets) > 1:
        each_in_its_own_process(args)
    else:
        uvloop.run(run(args))  # the service's event loop


if __name__ == "__main__":
    main()
