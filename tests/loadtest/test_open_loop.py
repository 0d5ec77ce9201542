"""The generator is open-loop: it sends on schedule whatever the server is doing."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from router.loadtest.loadgen import poisson_schedule, run_plan
from router.loadtest.plots import latency_histogram, percentiles_over_time
from router.loadtest.workload import PlannedRequest
from tests.support.fake_upstream import QuietHandler, ThreadedUpstream, send_body
from tests.support.services import Running, start_simulator

SLOW = {"ttft_p50_ms": 1500, "ttft_p99_ms": 1501, "tpot_p50_ms": 1, "tpot_p99_ms": 1,
        "output_tokens_p50": 8, "output_tokens_p99": 8, "tokens_per_chunk": 1}


@pytest.fixture(scope="module")
def slow_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = start_simulator(tmp_path_factory.mktemp("sim"), {"slow": SLOW})
    yield running
    running.stop()


def _plan(stream: bool, count: int) -> list[PlannedRequest]:
    body = (b'{"model":"slow","max_tokens":8,"messages":[{"role":"user","content":"hi"}]'
            + (b',"stream":true,"stream_options":{"include_usage":true}}' if stream else b"}"))
    return [PlannedRequest("slow", stream, body)] * count


async def test_all_requests_are_sent_before_the_first_slow_answer(slow_sim: Running,
                                                                  tmp_path: Path) -> None:
    """With a 1.5 s first token, every request leaves on schedule, long before any answer."""
    rate, duration = 40.0, 0.5
    count = len(poisson_schedule(rate, duration, seed=2))
    url = f"{slow_sim.base_url}/v1/chat/completions"
    result = await run_plan("sim", url, _plan(True, count), rate, duration, seed=2)
    first_answer = min(s.started + (s.ttft_s or 0) for s in result.samples)
    assert len(result.samples) == count > 5 and result.errors() == 0
    assert max(s.started for s in result.samples) < first_answer
    assert all(s.tpot_s is not None and s.output_tokens == 8 for s in result.samples)
    hist = latency_histogram([result], tmp_path / "hist.png", metric="ttft_s")
    over_time = percentiles_over_time(result, tmp_path / "time.png", window_s=0.1)
    assert hist.stat().st_size > 1000 and over_time.stat().st_size > 1000


async def test_http_errors_and_refused_connections_are_classified(slow_sim: Running) -> None:
    """A 404 is `http_404`; a closed port is a connection error class, not a crash."""
    bad_model = [PlannedRequest("x", False, b'{"model":"nope","messages":[]}')] * 2
    answered = await run_plan("sim", f"{slow_sim.base_url}/v1/chat/completions", bad_model,
                              20.0, 0.3, seed=4)
    refused = await run_plan("closed", "http://127.0.0.1:9/v1/chat/completions", bad_model,
                             20.0, 0.3, seed=4)
    assert {s.error for s in answered.samples} <= {"http_404", "http_400", "http_422"}
    assert all(s.error is not None and s.status == 0 for s in refused.samples)


async def test_latency_runs_from_the_scheduled_arrival_and_the_lag_is_kept(
        slow_sim: Running) -> None:
    """A request the generator sends 0.3 s after its scheduled time (a busy machine) counts
    those 0.3 s in its latency, as its client would have waited them (no coordinated
    omission), and reports them as its dispatch lag."""
    from router.loadtest.loadgen import send_one
    from router.providers.http1 import Http1Client, Target

    client = Http1Client()
    url = f"{slow_sim.base_url}/v1/chat/completions"
    try:
        now = time.perf_counter()
        late = await send_one(client, Target.of(url), _plan(False, 1)[0],
                              {"content-type": "application/json"}, now - 1.0, 30.0,
                              scheduled=now - 0.3)
    finally:
        await client.aclose()
    assert late.error is None and late.lag_s >= 0.3
    assert late.e2e_s is not None and late.e2e_s >= 1.5 + 0.3  # the slow model's TTFT, plus
    assert abs(late.started - 0.7) < 1e-9  # the scheduled offset from the run's start


async def test_progress_counts_are_kept_as_requests_end_not_rescanned_per_tick() -> None:
    """A progress tick runs on the loop that sends: it reads running counts (sent, done,
    errors) kept as each request ends, so its cost does not grow with the run (a scan of every
    request so far delayed the sends it overlapped). Cancelled requests are done, not errors."""
    from router.loadtest.loadgen import Sample, _Tally

    async def answer(error: str | None) -> Sample:
        return Sample(0.0, 0.01, 0.01, 200 if error is None else 0, error)

    tally = _Tally(origin=time.perf_counter())
    tasks = [asyncio.create_task(answer(e)) for e in (None, "http_500", None, "OSError")]
    stuck = asyncio.create_task(asyncio.sleep(60, Sample(0.0, None, None, 0)))
    for task in [*tasks, stuck]:
        tally.sent += 1
        task.add_done_callback(tally.finished)
    await asyncio.gather(*tasks)
    stuck.cancel()
    await asyncio.gather(stuck, return_exceptions=True)
    seen: list[tuple[int, int, int]] = []
    tally.report(lambda sent, done, errors, _elapsed: seen.append((sent, done, errors)))
    assert seen == [(5, 5, 2)]


async def test_an_interrupted_run_counts_the_requests_still_in_flight(
        slow_sim: Running) -> None:
    """Cancelled (Ctrl-C) while every request sent waits on a 1.5 s first token, the run
    returns each request it sent, as `interrupted`: dropped, they left a run that reported
    none sent and percentiles over only the quicker answers."""
    url = f"{slow_sim.base_url}/v1/chat/completions"
    sending = asyncio.Event()  # from the run's progress ticks (every 0.5 s): it has sent some

    def ticked(sent: int, _done: int, _errors: int, _elapsed: float) -> None:
        if sent >= 5:
            sending.set()

    run = asyncio.create_task(run_plan("sim", url, _plan(True, 40), 40.0, 1.0, seed=2,
                                       progress=ticked))
    # Not a fixed 0.5 s: the run starts with a full garbage collection, which in this long
    # test process can take longer than that on a slow machine (it was cancelled before it
    # had sent anything).
    await asyncio.wait_for(sending.wait(), 30)
    run.cancel()
    result = await run
    assert result.interrupted and len(result.samples) > 0
    assert {s.error for s in result.samples} == {"interrupted"}
    assert all(s.stream and s.cls == "slow" for s in result.samples)
    # each with the lag it was sent with (a made-up 0 hid a generator that had fallen behind)
    assert all(s.lag_s > 0 for s in result.samples)


class _AnswersWithoutACompletion(QuietHandler):
    """200 to every request, with an error object (`/v1/error/...`) or a body that is not
    JSON (`/v1/text/...`)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        body = (b'{"error": {"message": "quota exceeded", "type": "insufficient_quota"}}'
                if self.path.startswith("/v1/error/") else b"<html>maintenance</html>")
        send_body(self, 200, body)


async def test_a_200_whose_body_is_no_chat_completion_is_an_error() -> None:
    """A server answering 200 with an error object (some do, for quota) or an HTML page is
    failing, not answering: the run counted every such request as ok and exited 0."""
    upstream = ThreadedUpstream(_AnswersWithoutACompletion)
    try:
        plan = _plan(False, 4)
        errors = [await run_plan("stub", f"{upstream.base_url}/v1/{kind}/chat/completions",
                                 plan, 40.0, 1.0, seed=2) for kind in ("error", "text")]
    finally:
        upstream.stop()
    assert {s.error for s in errors[0].samples} == {"error_in_body"}
    assert {s.error for s in errors[1].samples} == {"not_a_completion"}
    assert all(s.status == 200 for r in errors for s in r.samples)
    assert not errors[0].ok() and not errors[1].ok()


@pytest.mark.parametrize(("code", "named"), [(errno.EMFILE, "generator_out_of_files"),
                                             (errno.EADDRNOTAVAIL, "generator_out_of_ports"),
                                             (errno.ECONNREFUSED, "UpstreamUnreachable")])
def test_the_generators_own_limits_are_not_blamed_on_the_target(code: int, named: str) -> None:
    """A connection the generator could not open for want of a file descriptor (a low
    `ulimit -n`) or a local port is its own failure, not the target being unreachable."""
    from router.loadtest.loadgen import _failure_class
    from router.providers.http1 import UpstreamUnreachable

    try:
        try:
            raise OSError(code, os.strerror(code))
        except OSError as exc:
            raise UpstreamUnreachable("cannot connect to upstream: OSError") from exc
    except UpstreamUnreachable as wrapped:
        assert _failure_class(wrapped) == named
    assert _failure_class(TimeoutError()) == "TimeoutError"


class LateTerminatorStream(QuietHandler):
    """Streams a short answer chunk-encoded, its terminating chunk 20 ms after `[DONE]` (as
    servers often send it, in a later write); records each connection's client port."""

    protocol_version = "HTTP/1.1"
    ports: ClassVar[set[int]] = set()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        type(self).ports.add(self.client_address[1])
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        events = [b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
                  b'data: {"choices":[{"index":0,"delta":{"content":" there"}}]}\n\n',
                  b"data: [DONE]\n\n"]
        for event in events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


async def test_a_stream_read_to_done_keeps_its_connection() -> None:
    """A stream is read to `[DONE]` and its connection kept for the next request once the
    body's end comes: aborted there when the terminator came later, it cost the next request
    a new connection in its TTFT, on some targets more than others (direct streams 27 times in
    40, slorouter's 2: the benchmark audit of 2026-12-07)."""
    upstream = ThreadedUpstream(LateTerminatorStream)
    LateTerminatorStream.ports = set()
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}'
    try:
        result = await run_plan("stub", f"{upstream.base_url}/v1/chat/completions",
                                [PlannedRequest("m", True, body)] * 30, 10.0, 3.0, seed=5)
    finally:
        upstream.stop()
    assert len(result.samples) == 30 and result.errors() == 0
    # One connection per request in flight at once (a handful at 10 req/s), not one a request.
    assert len(LateTerminatorStream.ports) <= 5, len(LateTerminatorStream.ports)
