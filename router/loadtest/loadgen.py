"""Open-loop load: Poisson arrivals at a target rate, sent independently of responses.

Arrival times are drawn up front from a seed (`poisson_schedule`), so every target sees the same
schedule and the same bodies. Each request is its own task started at its arrival time, whatever
earlier requests are doing; the run is bounded by a request count and a duration. A `Sample`
records E2E, TTFT (first *content* chunk for streams; the whole response otherwise), TPOT and an
error class. TPOT is DESIGN.md's, by the router's own function (`router.stats.tpot_s`):
`(t_last - t_first) / (output_tokens - 1)` over the stream's first and last content chunks, the
output tokens from the usage chunk that `stream_options.include_usage` asks for, so a benchmark
and the router's metrics read the same TPOT; a server that sends no usage has its content chunks
counted instead (as the router counts them), and each sample says which (`tpot_tokens`).

Requests go out on the pass-through adapter's HTTP/1.1 client (`router.providers.http1`): a load
generator shares the machine with what it measures, so its own CPU per request is kept small
(about a third of aiohttp's client), and its garbage collector is paused while a run sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import orjson

from router.loadtest.workload import PlannedRequest, Workload, plan_requests
from router.providers.http1 import (
    Http1Client,
    HttpClientError,
    Response,
    Target,
    lines,
    request_head,
)
from router.stats.observation import tpot_s

# an SSE line (or body) carrying a non-empty content string: an answer's first token
CONTENT = re.compile(rb'"content":\s?"[^"]')
_USAGE = re.compile(rb'"completion_tokens":\s?(\d+)')

ProgressFn = Callable[[int, int, int, float], None]
# Where a stream's output tokens for TPOT came from: the server's usage chunk, or its content
# chunks counted (no usage sent: one token a chunk, a lower bound where chunks carry several).
TokenSource = Literal["usage", "chunks"]

# How late (p99, ms) the generator may send after the schedule before a run is flagged: past
# it, the tail of every latency is the generator's own (its lag is inside each figure, from the
# scheduled arrival) and the target saw the load later and bunched, not at the rate asked.
LAG_BOUND_MS = 5.0


@dataclass(frozen=True, slots=True)
class Sample:
    started: float  # seconds since the run started
    ttft_s: float | None
    e2e_s: float | None
    status: int
    error: str | None = None
    cls: str = ""
    stream: bool = False
    tpot_s: float | None = None
    output_tokens: int | None = None
    cache: str | None = None  # the router's `x-slorouter-cache` answer header, when present
    lag_s: float = 0.0  # how late the generator sent it after its scheduled time
    tpot_tokens: TokenSource | None = None  # where TPOT's output tokens came from (with a TPOT)


@dataclass
class RunResult:
    target: str
    rate: float
    duration_s: float
    samples: list[Sample] = field(default_factory=list)
    # from the schedule's origin (where its Poisson arrivals start: the first comes an
    # exponential wait after it, part of the offered period) to the last answer
    wall_s: float = 0.0
    interrupted: bool = False  # stopped early (Ctrl-C): the answers, and those in flight cut

    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 200 and s.error is None]

    def percentiles_ms(self, metric: str, qs: Sequence[float] = (50, 99)) -> list[float]:
        values = [getattr(s, metric) for s in self.ok() if getattr(s, metric) is not None]
        if not values:
            return [float("nan")] * len(qs)
        return [float(v) * 1e3 for v in np.percentile(values, qs)]

    @property
    def achieved_rate(self) -> float:
        return sent_rate(self.samples)

    def lag_p99_ms(self) -> float:
        """p99 of how late the generator sent after the schedule (ms); NaN with no samples."""
        lags = [s.lag_s for s in self.samples]
        return float(np.percentile(lags, 99)) * 1e3 if lags else float("nan")

    @property
    def generator_behind(self) -> bool:
        """The generator could not keep to the schedule (`LAG_BOUND_MS`): not a measurement
        of the target at this rate, whatever its figures."""
        return generator_behind(self.lag_p99_ms())

    def errors(self) -> int:
        return len(self.samples) - len(self.ok())


def generator_behind(lag_p99_ms: float | None) -> bool:
    return lag_p99_ms is not None and lag_p99_ms > LAG_BOUND_MS


def sent_rate(samples: Sequence[Sample]) -> float:
    """Requests per second as they were sent: the gaps between the first and last sends (a
    run cut short by `--max-requests` sends at the target rate, not at count / duration); NaN
    with fewer than two sends."""
    if len(samples) < 2:
        return float("nan")
    sent = sorted(s.started + s.lag_s for s in samples)
    span = sent[-1] - sent[0]
    return (len(sent) - 1) / span if span > 0 else float("nan")


# The most requests one run plans: each is planned before the first is sent (its body shared
# with every other request of the same prompt and class), and a rate and duration asking for
# billions stopped on memory after minutes, or took the machine's, before any load.
MAX_RUN_REQUESTS = 1_000_000


def check_run_size(rate: float, duration_s: float, max_requests: int | None) -> None:
    """A `ValueError` for a run of more than `MAX_RUN_REQUESTS` expected arrivals, unless
    `max_requests` caps it below that."""
    expected = rate * duration_s
    if expected > MAX_RUN_REQUESTS and (max_requests is None or max_requests > MAX_RUN_REQUESTS):
        raise ValueError(f"rate x duration asks for about {expected:,.0f} requests, more than "
                         f"{MAX_RUN_REQUESTS:,} a run: lower --rate or --duration, or cap the "
                         "run with --max-requests")


def poisson_schedule(rate: float, duration_s: float, seed: int,
                     max_requests: int | None = None) -> np.ndarray:
    """Arrival offsets (s) of a Poisson process at `rate`, within `duration_s`, at most N.
    The gaps are drawn in order from `seed`, so a longer duration or a higher cap extends the
    same schedule: its first arrivals are those of a shorter one."""
    rng = np.random.default_rng(seed)
    chunk = int(rate * duration_s * 1.5) + 10
    parts: list[np.ndarray] = []
    last, drawn = 0.0, 0
    while last < duration_s and (max_requests is None or drawn < max_requests):
        size = chunk if max_requests is None else min(chunk, max_requests - drawn)
        times = last + np.cumsum(rng.exponential(1.0 / rate, size=size))
        parts.append(times)
        last, drawn = float(times[-1]), drawn + size
    times = np.concatenate(parts) if parts else np.empty(0)
    times = times[times < duration_s]
    return times[:max_requests] if max_requests is not None else times


def plan_run(workload: Workload, rate: float, duration_s: float, seed: int,
             max_requests: int | None = None, model: str | None = None) -> list[PlannedRequest]:
    """The requests of a run, one per arrival of its schedule; a `ValueError` for a run too
    large to plan (`check_run_size`) or one whose schedule holds no arrival (it would send
    nothing and report success)."""
    check_run_size(rate, duration_s, max_requests)
    count = len(poisson_schedule(rate, duration_s, seed, max_requests))
    if count == 0:
        raise ValueError(f"no arrival falls within {duration_s:g} s at {rate:g} requests/s "
                         f"(seed {seed}): raise --rate or --duration")
    return plan_requests(workload, count, seed, model)


def covering_duration(rate: float, duration_s: float, seed: int, min_requests: int) -> float:
    """The least duration, at least `duration_s`, whose schedule at `rate` from `seed` holds
    `min_requests` arrivals (a point's duration of `min_requests / rate` fell short about half
    the time: its arrivals are random)."""
    if min_requests <= 0:
        return duration_s
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, size=min_requests))
    return max(duration_s, float(np.nextafter(arrivals[-1], np.inf)))


async def _read_stream(response: Response, started: float) -> tuple[
        float | None, float | None, int | None, TokenSource | None, str | None]:
    first = last = None
    tokens: int | None = None
    chunks = 0
    error, done = None, False
    async for line in lines(response.chunks()):
        if not line.startswith(b"data: "):
            continue
        if line.startswith(b"data: [DONE]"):
            # The connection is reused once the body's end comes: left to the reader's close,
            # a stream whose chunked terminator had not arrived yet was aborted, and the next
            # request paid a new connection in its TTFT (direct streams 27 times in 40 at 5
            # req/s, slorouter's 2: the benchmark audit of 2026-12-07).
            response.finish()
            done = True
            break
        if CONTENT.search(line):
            last = time.perf_counter()
            first = first if first is not None else last
            chunks += 1
        elif b'"error"' in line:
            error = "stream_error"
        usage = _USAGE.search(line) if b'"usage"' in line else None
        if usage is not None:
            tokens = int(usage.group(1))
    if error is None and not done:
        error = "truncated"
    ttft = first - started if first is not None else None
    tpot, source = stream_tpot(first, last, tokens, chunks)
    return ttft, tpot, tokens, source, error


def stream_tpot(first: float | None, last: float | None, usage_tokens: int | None,
                chunks: int) -> tuple[float | None, TokenSource | None]:
    """DESIGN.md's TPOT, `(last - first) / (output_tokens - 1)`, by the function the router
    records with (`router.stats.tpot_s`), and where the output tokens came from: the usage's
    `completion_tokens` when the server sent them, else the content chunks counted, as the
    router counts them without usage (fewer than the tokens where a chunk carries several, so
    TPOT then reads high). (None, None) when undefined: one token, or all in one chunk.
    With n tokens in chunks of k this is (n - k) / (n - 1) of the provider's pace (0.8 at 16
    tokens in 4s), as the router's TPOT is: dividing by the tokens after the first chunk
    instead read the pace, and disagreed with the router's figure by that much."""
    if first is None or last is None:
        return None, None
    source: TokenSource = "usage" if usage_tokens is not None else "chunks"
    tpot = tpot_s(first, last, usage_tokens if usage_tokens is not None else chunks)
    return (tpot, source) if tpot is not None else (None, None)


async def send_one(client: Http1Client, target: Target, request: PlannedRequest,
                   headers: Mapping[str, str], origin: float, timeout_s: float,
                   scheduled: float | None = None) -> Sample:
    """One request. Its latencies run from its `scheduled` arrival (default: now), not from
    when the generator got to send it: a generator that falls behind (a busy machine) must not
    hide the wait from the numbers (coordinated omission); the lag is kept beside them. Never
    re-sent: every request the target sees is one the run counts."""
    sent = time.perf_counter()
    started = scheduled if scheduled is not None else sent
    offset = started - origin
    lag = max(0.0, sent - started)
    try:
        async with asyncio.timeout(timeout_s):
            response = await client.post(target, request_head(target, headers,
                                                               len(request.body)),
                                         request.body, connect_timeout_s=timeout_s,
                                         resendable=False)
            if response.status != 200:
                await response.read()
                return Sample(offset, None, time.perf_counter() - started, response.status,
                              f"http_{response.status}", request.cls, request.stream, lag_s=lag)
            cache = response.headers.get("x-slorouter-cache")
            if not request.stream:
                raw = await response.read()
                elapsed = time.perf_counter() - started
                usage = _USAGE.search(raw)
                return Sample(offset, elapsed, elapsed, 200, _body_problem(raw), request.cls,
                              False, None, int(usage.group(1)) if usage else None, cache, lag)
            ttft, tpot, tokens, source, error = await _read_stream(response, started)
            return Sample(offset, ttft, time.perf_counter() - started, 200, error, request.cls,
                          True, tpot, tokens, cache, lag, source)
    except (TimeoutError, HttpClientError, OSError) as exc:
        return Sample(offset, None, None, 0, _failure_class(exc), request.cls, request.stream,
                      lag_s=lag)


def _body_problem(raw: bytes) -> str | None:
    """None for a chat completion; else the error class of a 200 whose body is not one (an
    error object some servers answer with a 200, or anything else), which a run must not
    count as an answer."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "not_a_completion"
    if isinstance(body, dict) and isinstance(body.get("choices"), list):
        return None
    return "error_in_body" if isinstance(body, dict) and "error" in body else "not_a_completion"


# The generator's own limits, not the target's: a connection it could not open for want of a
# file descriptor or of memory is counted apart, so a run does not blame the target for them.
_LOCAL_ERRNOS = {errno.EMFILE: "generator_out_of_files", errno.ENFILE: "generator_out_of_files",
                 errno.ENOBUFS: "generator_out_of_buffers", errno.ENOMEM: "generator_out_of_memory",
                 errno.EADDRNOTAVAIL: "generator_out_of_ports"}


def _failure_class(exc: BaseException) -> str:
    """A request's error class: the exception's name, or the generator's own limit behind it."""
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, OSError) and cause.errno in _LOCAL_ERRNOS:
        return _LOCAL_ERRNOS[cause.errno]
    return type(exc).__name__


async def run_plan(target: str, url: str, plan: Sequence[PlannedRequest], rate: float,
                   duration_s: float, seed: int = 7, api_key: str | None = None,
                   timeout_s: float = 30.0, progress: ProgressFn | None = None) -> RunResult:
    """Send `plan[i]` at the i-th Poisson arrival; wait (bounded by `timeout_s`) for all."""
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    schedule = poisson_schedule(rate, duration_s, seed, max_requests=len(plan))
    with collector_paused():
        samples, wall_s, interrupted = await _send_all(url, plan, schedule, headers, timeout_s,
                                                       progress)
    return RunResult(target, rate, duration_s, samples, wall_s, interrupted)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection while a run sends: a collection pauses the sender's loop (20-40 ms
    for a full one in the load generator, 150-270 ms in a test process that has imported
    litellm), which would show as the target's latency. Runs are bounded in count and time,
    so the garbage they leave is bounded too; the collector's next pass takes it. Nests: the
    collector's state on entry is its state on exit."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


async def _send_all(url: str, plan: Sequence[PlannedRequest], schedule: np.ndarray,
                    headers: Mapping[str, str], timeout_s: float,
                    progress: ProgressFn | None) -> tuple[list[Sample], float, bool]:
    """Every request at its time, then every answer; cancelled (Ctrl-C under `asyncio.run`),
    the requests still running are abandoned, counted as `interrupted`, and returned with the
    answers so far and True."""
    client, target = Http1Client(max_connections_per_origin=100_000), Target.of(url)
    origin = time.perf_counter()
    tasks: list[asyncio.Task[Sample]] = []
    lags: list[float] = []  # each send's lag at dispatch, for the requests an interrupt cuts
    tally = _Tally(origin)
    ticker = _ticker(tally, progress) if progress else None
    interrupted = False
    try:
        for at, request in zip(schedule, plan, strict=False):
            delay = origin + float(at) - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(
                send_one(client, target, request, headers, origin, timeout_s,
                         origin + float(at)))
            lags.append(max(0.0, time.perf_counter() - origin - float(at)))
            tally.sent += 1
            task.add_done_callback(tally.finished)
            tasks.append(task)
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        interrupted = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        if ticker is not None:
            ticker.cancel()
            tally.report(progress)
        await client.aclose()
    samples = [t.result() if not t.cancelled() else _cut(float(at), request, lag)
               for t, at, request, lag in zip(tasks, schedule, plan, lags, strict=False)]
    return samples, time.perf_counter() - origin, interrupted


def _cut(at: float, request: PlannedRequest, lag_s: float) -> Sample:
    """A request sent but still unanswered when the run was interrupted: counted, under its
    own error class, not dropped (dropping them understated the count of requests sent; like
    every failed request, it has no latency in the percentiles, which are the answers'), with
    the lag it was sent with (a lag of 0 for each hid a generator that had fallen behind)."""
    return Sample(at, None, None, 0, "interrupted", request.cls, request.stream, lag_s=lag_s)


@dataclass
class _Tally:
    """Running counts for the progress display, kept as each request ends, so that a tick
    reads three numbers: it runs on the loop that sends, and a tick that scanned every request
    so far (1.7 ms at 24,000, growing with the run) would delay the sends it overlaps, lag
    that the latencies, timed from the schedule, would then carry."""

    origin: float
    sent: int = 0
    done: int = 0
    errors: int = 0

    def finished(self, task: asyncio.Task[Sample]) -> None:
        self.done += 1
        if not task.cancelled() and task.result().error is not None:
            self.errors += 1

    def report(self, progress: ProgressFn | None) -> None:
        if progress is not None:
            progress(self.sent, self.done, self.errors, time.perf_counter() - self.origin)


def _ticker(tally: _Tally, progress: ProgressFn) -> asyncio.Task[None]:
    async def tick() -> None:
        while True:
            tally.report(progress)
            await asyncio.sleep(0.5)

    return asyncio.create_task(tick())


async def run_open_loop(target: str, url: str, payload: dict[str, object], rate: float,
                        duration_s: float, seed: int = 7, api_key: str | None = None,
                        timeout_s: float = 30.0) -> RunResult:
    """One fixed payload at Poisson times (the form `bench/overhead.py` uses)."""
    stream = bool(payload.get("stream"))
    count = len(poisson_schedule(rate, duration_s, seed))
    request = PlannedRequest("fixed", stream, orjson.dumps(payload))
    return await run_plan(target, url, [request] * count, rate, duration_s, seed, api_key,
                          timeout_s)
