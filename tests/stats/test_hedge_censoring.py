"""A primary that lost a hedge race still tells the statistics that it was slow."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from router.execution.attempt import AttemptRecord
from router.feedback import StatsSink
from router.outcomes import Outcome
from router.slo import SloTracker
from router.stats import LocalStatsStore, Observation, StatsConfig


def _hedged_outcome(primary_ran_s: float) -> Outcome:
    """`slow` ran `primary_ran_s` without a token, then lost to a hedge on `fast`."""
    start = time.perf_counter()
    primary = AttemptRecord("slow", 1, start, "first", "cancelled",
                            ended_at=start + primary_ran_s)
    hedge = AttemptRecord("fast", 2, start + 0.2, "hedge", "won",
                          first_content_at=start + 0.25, ended_at=start + 0.3)
    return Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                   arrived_at=start, task="chat", deployment="fast", first_content_at=start + 0.25,
                   ended_at=start + 0.3, prompt_tokens=10, completion_tokens=5,
                   attempts=[primary, hedge])


def test_lost_race_is_recorded_at_its_lower_bound_and_keeps_the_tail_mass() -> None:
    store = LocalStatsStore(StatsConfig())
    sink = StatsSink(store, SloTracker({}))
    for _ in range(90):  # the fast body: answered by the primary itself in 100 ms
        start = time.perf_counter()
        won = AttemptRecord("slow", 1, start, "first", "won", first_content_at=start + 0.1,
                            ended_at=start + 0.12)
        sink.record(Outcome(request_id="b", tenant="t", requested_model="auto", stream=True,
                            arrived_at=start, task="chat", deployment="slow",
                            first_content_at=start + 0.1, ended_at=start + 0.12,
                            attempts=[won]))
    for _ in range(10):  # the tail: each one hedged after 0.3 s and lost
        sink.record(_hedged_outcome(0.3))
    p95, weight = store.ttft_quantile("slow", "chat", 0.95)
    assert weight >= 99  # the ten lost races count
    assert p95 is not None and p95 >= 0.29  # the tail is still above the body, not dropped
    p80, _ = store.ttft_quantile("slow", "chat", 0.80)
    assert p80 is not None and p80 < 0.15


def test_hedge_delay_is_capped_at_a_multiple_of_the_median_when_the_tail_weighs_more() -> None:
    """A window where the tail is heavier than 1 - percentile puts p88 inside the tail; the
    delay then falls back to 3x the median TTFT, so hedges still start before the tail ends."""
    from router.feedback import HedgeDelays
    from router.stats import Observation

    store = LocalStatsStore(StatsConfig())
    now = time.time()
    for i in range(100):
        slow = i % 5 == 0  # 20% of answers in the 10x tail: p88 lands in it
        ttft = 1.0 if slow else 0.1
        store.record(Observation(deployment="d", task="chat", prompt_tokens=10,
                                 output_tokens=5, ttft_s=ttft, tpot_s=0.01, e2e_s=ttft + 0.05,
                                 queue_s=0.0, error=None, cached=False, t=now))
    p88, _ = store.ttft_quantile("d", "chat", 0.88)
    assert p88 is not None and p88 > 0.5
    delay = HedgeDelays(store, percentile=0.88, max_median_ratio=3.0)("d", "chat", 10)
    assert delay is not None and 0.25 < delay < 0.35
    uncapped = HedgeDelays(store, percentile=0.5, max_median_ratio=3.0)("d", "chat", 10)
    assert uncapped is not None and uncapped < 0.15  # below the cap, the percentile rules


@settings(max_examples=60, deadline=None)
@given(ttfts=st.lists(st.floats(0.001, 5.0), min_size=1, max_size=80),
       percentile=st.floats(0.01, 0.99), ratio=st.floats(1.01, 10.0))
def test_hedge_delay_reads_both_levels_in_one_pass_with_the_same_answer(
        ttfts: list[float], percentile: float, ratio: float) -> None:
    """`HedgeDelays` reads the percentile and the median from one `ttft_quantiles` call (one
    sort of the sketch); the delay is what the two separate `ttft_quantile` reads gave, for
    percentiles above and below the median."""
    from router.feedback import HedgeDelays
    from router.stats import Observation

    now = time.time()
    store = LocalStatsStore(StatsConfig(), clock=lambda: now)  # weights read at one time
    for ttft in ttfts:
        store.record(Observation(deployment="d", task="chat", prompt_tokens=10,
                                 output_tokens=5, ttft_s=ttft, tpot_s=0.01, e2e_s=ttft + 0.05,
                                 queue_s=0.0, error=None, cached=False, t=now))
    value, weight = store.ttft_quantile("d", "chat", percentile)
    median, _ = store.ttft_quantile("d", "chat", 0.5)
    levels = sorted((percentile, 0.5))
    both, both_weight = store.ttft_quantiles("d", "chat", levels)
    assert both is not None and value is not None and median is not None
    assert dict(zip(levels, both, strict=True)) == {percentile: value, 0.5: median}
    assert both_weight == weight
    delays = HedgeDelays(store, percentile=percentile, max_median_ratio=ratio,
                         min_observations=1.0)
    expected = min(value, ratio * median) if weight >= 1.0 else None
    assert delays("d", "chat", 10) == expected
    assert HedgeDelays(store, percentile=percentile)("none", "chat", 10) is None


class _Requests(SloTracker):
    """The real tracker, keeping each request observation it is given."""

    def __init__(self) -> None:
        super().__init__({})
        self.seen: list[str | None] = []
        self.streamed: list[bool] = []

    def record_request(self, obs: Observation, streamed: bool = True) -> None:
        self.seen.append(obs.error)
        self.streamed.append(streamed)
        super().record_request(obs, streamed)


def test_availability_counts_the_providers_faults_not_the_callers() -> None:
    """A request the provider refused as malformed (400 `ProviderRejectedError`, e.g. context
    length exceeded) is the caller's to fix, as the router's own 400s are: it does not count
    against availability (it did). Throttling (429) and 5xx do."""
    slo = _Requests()
    sink = StatsSink(LocalStatsStore(StatsConfig()), slo)
    start = time.perf_counter()
    for status, error in ((400, "ProviderRejectedError"), (400, "RequestError"),
                          (429, "ProviderRateLimitedError"), (503, "ProviderUnavailableError"),
                          (200, None)):
        sink.record(Outcome(request_id="r", tenant="t", requested_model="auto", stream=False,
                            arrived_at=start, task="chat", deployment="d", status=status,
                            error_type=error, ended_at=start + 0.1))
    assert slo.seen == ["ProviderRateLimitedError", "ProviderUnavailableError", None]
    assert slo.streamed == [False, False, False]  # judged on E2E (`event_deltas`)


def test_a_hedge_that_lost_the_race_adds_no_latency_sample() -> None:
    """The primary answered while its hedge had run 50 ms: that age says nothing of the hedge's
    deployment (cut by the primary's answer, not by its own slowness), so nothing is recorded
    for it; the primary's own answer is."""
    store = LocalStatsStore(StatsConfig())
    sink = StatsSink(store, SloTracker({}))
    start = time.perf_counter()
    primary = AttemptRecord("body", 1, start, "first", "won", first_content_at=start + 0.3,
                            ended_at=start + 0.32)
    hedge = AttemptRecord("target", 2, start + 0.25, "hedge", "cancelled",
                          ended_at=start + 0.3)
    sink.record(Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                        arrived_at=start, task="chat", deployment="body",
                        first_content_at=start + 0.3, ended_at=start + 0.32,
                        attempts=[primary, hedge]))
    assert store.ttft_quantile("target", "chat", 0.5) == (None, 0.0)
    assert store.ttft_quantile("body", "chat", 0.5)[1] > 0.0


def test_an_attempt_its_clients_deadline_cut_is_a_censored_sample_not_an_error() -> None:
    """Cut by the client's own deadline before its first token, an attempt is no error of its
    deployment (its availability holds), but its TTFT took longer than it ran: recorded at that
    lower bound, a deployment slower than its clients' patience still shows slow (dropped, it
    would learn nothing and keep its traffic)."""
    from router.errors import ProviderTimeoutError

    store = LocalStatsStore(StatsConfig())
    slo = _Requests()
    sink = StatsSink(store, slo)
    for _ in range(20):
        start = time.perf_counter()
        cut = AttemptRecord("slow", 1, start, "first", "failed", ended_at=start + 2.0)
        cut.error = ProviderTimeoutError("during the upstream attempt", code="deadline_exceeded")
        sink.record(Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                            arrived_at=start, task="chat", deployment="slow", status=504,
                            error_type="ProviderTimeoutError", ended_at=start + 2.0,
                            attempts=[cut]))
    p50, weight = store.ttft_quantile("slow", "chat", 0.5)
    assert weight >= 19 and p50 is not None and p50 >= 1.9
    summary = store.view("slow", "chat", 10).task
    assert summary is not None and summary.error_rate == 0.0


def test_a_stream_its_client_left_counts_for_ttft_not_for_length_or_e2e() -> None:
    """The client closed the stream after its first chunks: the deployment's TTFT stands, but
    how long the answer would have run, and when it would have ended, are not known. Recorded
    whole, abandoned streams pulled the task's output-length history (and so predicted E2E)
    down, and counted as E2E SLO events met."""
    from router.slo import SloTargets

    store = LocalStatsStore(StatsConfig())
    slo = SloTracker({"chat": SloTargets(ttft_p95_s=1.0, e2e_p99_s=5.0)})
    sink = StatsSink(store, slo)

    def stream(tokens: int, left: bool) -> None:
        start = time.perf_counter()
        won = AttemptRecord("dep", 1, start, "first", "won", first_content_at=start + 0.1,
                            ended_at=start + 0.5)
        won.abandoned = left
        sink.record(Outcome(request_id="r", tenant="t", requested_model="auto", stream=True,
                            arrived_at=start, task="chat", deployment="dep",
                            first_content_at=start + 0.1, last_token_at=start + 0.5,
                            ended_at=start + 0.5, prompt_tokens=10, completion_tokens=tokens,
                            client_disconnected=left, attempts=[won]))

    for _ in range(20):
        stream(200, left=False)
    for _ in range(60):
        stream(2, left=True)
    summary = store.task_summary("chat")
    assert summary is not None and summary.output_tokens is not None
    assert summary.output_tokens.p50 >= 150
    _, ttft_weight = store.ttft_quantile("dep", "chat", 0.5)
    assert ttft_weight >= 79  # every stream's first token counts
    # read after the last stream's end (each ends 0.5 s after it starts, past the clock's now)
    windows = slo.snapshot(now=time.time() + 1.0).tasks[0].deployments[0].windows[0]
    e2e = next(s for s in windows.slis if s.sli == "e2e")
    assert e2e.total == 20
