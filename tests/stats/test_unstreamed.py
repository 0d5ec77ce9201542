"""Non-streamed answers feed the E2E of their own, not the TTFT estimates; non-streamed requests
are ranked on it.

A non-streamed attempt's first content is its whole answer. Recorded as a TTFT, a deployment
serving long non-streamed answers looked slow to streamed traffic, and a request's predicted
TTFT mixed both kinds (docs/latency-feedback.md §7, before). Now: streamed answers feed TTFT,
TPOT and the TTFT model; non-streamed ones an E2E sketch (prompt bucket and deployment x task);
a non-streamed request is scored on E2E (falling back on TTFT + TPOT x output tokens without
samples); a non-streamed attempt in flight waits for its answer, not for a first token.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import cast

import pytest

from policies.eligibility import RequestFacts, Verdict
from policies.schema import SloSpec, TaskPolicy
from router.execution.attempt import AttemptRecord
from router.feedback import HedgeDelays, StatsRanker, StatsSink
from router.outcomes import Outcome
from router.runtime_config import RuntimeConfig
from router.scoring import Candidate, ScoreRequest, ScoringConfig, predict
from router.scoring.blend_cache import BlendCache
from router.slo import SloTargets, SloTracker
from router.stats import ANY_BUCKET, LocalStatsStore, Observation
from router.stats.codec import decode_state, encode_state
from router.stats.inflight import InFlight
from tests.stats.sim import FakeClock

TARGETS = SloTargets(ttft_p95_s=1.0, availability=0.99)


def _obs(dep: str, t: float, *, ttft: float, e2e: float, streamed: bool,
         out: int = 100) -> Observation:
    tpot = (e2e - ttft) / (out - 1) if streamed else None
    return Observation(dep, "chat", 16, out, ttft, tpot, e2e, 0.0, None, False, t, streamed)


def _mixed_store() -> tuple[LocalStatsStore, FakeClock]:
    """A: first token in 100 ms, slow tokens (a 100-token answer takes 2.1 s); B: first token in
    400 ms, fast tokens (0.6 s). Half the traffic is streamed, half not, on both."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(200):
        streamed = i % 2 == 0
        jitter = 1.0 + 0.01 * (i % 5)
        for dep, ttft, e2e in (("A", 0.1, 2.1), ("B", 0.4, 0.6)):
            # Non-streamed: the first content is the whole answer.
            first = ttft * jitter if streamed else e2e * jitter
            store.record(_obs(dep, clock.now, ttft=first, e2e=e2e * jitter, streamed=streamed))
        clock.now += 0.01
    store.refresh()
    return store, clock


def test_a_non_streamed_answer_feeds_e2e_not_ttft_tpot_or_the_ttft_model() -> None:
    """Its 'TTFT' is its generation time: it goes to the E2E sketches (prompt bucket and
    deployment x task) and the success count, never to TTFT, TPOT or the TTFT model."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for _ in range(20):
        store.record(_obs("A", clock.now, ttft=2.0, e2e=2.0, streamed=False))
    view = store.view("A", "chat", 16)
    assert view.bucket is not None and view.task is not None and view.deployment_all is not None
    assert view.bucket.ttft is None and view.task.tpot is None and view.deployment_all.tpot is None
    assert view.deployment_all.ttft_fit is None or view.deployment_all.ttft_fit.weight == 0.0
    assert view.bucket.e2e is not None and view.bucket.e2e.p50 == pytest.approx(2.0, rel=0.02)
    assert view.task.e2e is not None
    assert view.bucket.n_ok == pytest.approx(20.0) and view.bucket.n_unstreamed == \
        pytest.approx(20.0)
    assert store.ttft_quantiles("A", "chat", (0.5,)) == (None, 0.0)
    found, weight = store.e2e_quantiles("A", "chat", (0.5, 0.9))
    assert found is not None and found[0] == pytest.approx(2.0, rel=0.02) and weight >= 19.9
    store.record(_obs("A", clock.now, ttft=0.1, e2e=2.0, streamed=True))
    store.refresh()
    view = store.view("A", "chat", 16)
    assert view.bucket is not None and view.bucket.ttft is not None
    assert view.bucket.ttft.p99 == pytest.approx(0.1, rel=0.02)  # the stream's only


def test_the_e2e_sketch_travels_between_replicas_and_old_states_still_load() -> None:
    """Encoded with the E2E sketch and the non-streamed count, decoded alike; a state from a
    replica before this change (neither of them) decodes with every success as streamed."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    store.record(_obs("A", clock.now, ttft=0.1, e2e=1.0, streamed=True))
    store.record(_obs("A", clock.now, ttft=3.0, e2e=3.0, streamed=False))
    state = store.own_states()[("A", "chat", ANY_BUCKET)]
    back = decode_state(encode_state(state), state.decay, state.alpha)
    summary = back.summarize(clock.now)
    assert summary.e2e is not None and summary.e2e.p50 == pytest.approx(3.0, rel=0.02)
    assert summary.n_unstreamed == pytest.approx(1.0) and summary.n_ok == pytest.approx(2.0)


def test_a_non_streamed_wait_is_no_wait_for_a_first_token() -> None:
    """A non-streamed attempt in flight is counted, but reported apart from the streamed ones
    waiting for a first token; its first content or its end takes it off."""
    flight = InFlight()
    whole = flight.begin("A", 100.0, 16, streamed=False)
    assert flight.view("A", 0) == (1, None, 100.0)
    stream = flight.begin("A", 101.0, 16)
    assert flight.view("A", 0) == (2, 101.0, 100.0)
    assert flight.view("A", 0).oldest_unstreamed_since == 100.0
    flight.first_token(whole)
    assert flight.view("A", 0) == (2, 101.0, None)
    flight.end(whole)
    flight.end(stream)
    assert flight.view("A", 0) == (0, None, None)
    assert flight.begin("B", 1.0, 9000, streamed=False) and flight.view("B", 0)[2] is None


def _ranker(store: LocalStatsStore, clock: FakeClock) -> StatsRanker:
    config = SimpleNamespace(deployments={
        d: SimpleNamespace(input_price_per_mtok=1.0, output_price_per_mtok=1.0) for d in "AB"})
    return StatsRanker(cast(RuntimeConfig, config), store, SloTracker({}), lambda d: False,
                       random.Random(1), explore_share=0.0, clock=clock,
                       blends=BlendCache(reuse_s=0.0))


def test_streamed_requests_rank_on_ttft_and_non_streamed_ones_on_e2e() -> None:
    """Same price, TTFT p95 <= 1 s: a stream goes to A (first token in 100 ms), a non-streamed
    request to B (whole answer in 0.6 s against A's 2.1 s). Before, A's TTFT held its 2.1 s
    non-streamed answers: its p95 missed the target and both kinds went to B."""
    store, clock = _mixed_store()
    ranker = _ranker(store, clock)
    policy = TaskPolicy(candidates=("A", "B"), objective="min_cost",
                        slo=SloSpec(ttft_p95_ms=1000, availability=0.99))
    verdicts = [cast(Verdict, SimpleNamespace(deployment=d)) for d in "AB"]
    streamed = RequestFacts("chat", "low", 16, 100, stream=True)
    whole = RequestFacts("chat", "low", 16, 100, stream=False)
    first = ranker.ranking(policy, streamed, ["A", "B"]).candidates[0]
    assert first.deployment == "A" and first.meets_slo
    assert first.prediction.ttft_q_s < 0.2
    ranked = ranker.ranking(policy, whole, ["A", "B"]).candidates
    assert [c.deployment for c in ranked] == ["B", "A"]
    assert ranked[0].prediction.e2e_q_s == pytest.approx(0.6, rel=0.1)
    assert ranked[1].prediction.e2e_q_s == pytest.approx(2.1, rel=0.1)
    assert ranker.rank(policy, whole, verdicts)[0].deployment == "B"


def test_without_e2e_samples_a_non_streamed_request_is_predicted_from_ttft_and_tpot() -> None:
    """No non-streamed answer seen yet: its E2E is the streamed bound TTFT + TPOT x (O - 1), as
    a stream's is; only the TTFT and TPOT targets no longer apply to it."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for _ in range(50):
        store.record(_obs("A", clock.now, ttft=1.5, e2e=3.5, streamed=True))
    store.refresh()
    cand = Candidate("A", 1.0, 1.0, store.view("A", "chat", 16))
    config = ScoringConfig()
    streamed = predict(cand, ScoreRequest("chat", "low", 16, 100, True), 100, TARGETS, config,
                       clock.now)
    whole = predict(cand, ScoreRequest("chat", "low", 16, 100, False), 100, TARGETS, config,
                    clock.now)
    assert whole.e2e_p50_s == streamed.e2e_p50_s and whole.e2e_q_s == streamed.e2e_q_s
    assert streamed.p_meet < 0.01 and whole.p_meet > 0.9  # TTFT 1.5 s misses the 1 s target
    assert whole.n_eff == 0.0 and streamed.n_eff > 40


def test_a_waiting_non_streamed_attempt_censors_e2e_not_ttft() -> None:
    """A non-streamed attempt waiting 3 s (answers usually take 0.6 s) raises the E2E of
    non-streamed requests to its age; streamed requests see no stalled first token."""
    store, clock = _mixed_store()
    store.begin("B", clock.now - 3.0, 16, streamed=False)
    cand = Candidate("B", 1.0, 1.0, store.view("B", "chat", 16))
    config = ScoringConfig()
    streamed = predict(cand, ScoreRequest("chat", "low", 16, 100, True), 100, TARGETS, config,
                       clock.now)
    whole = predict(cand, ScoreRequest("chat", "low", 16, 100, False), 100,
                    replace(TARGETS, e2e_p99_s=2.0), config, clock.now)
    assert streamed.censored_wait_s == 0.0 and streamed.ttft_q_s < 0.5
    assert whole.censored_wait_s == pytest.approx(3.0)
    assert whole.e2e_p50_s == pytest.approx(3.0) and whole.e2e_q_s >= 3.0
    assert whole.p_meet == 0.0


def test_a_non_streamed_requests_hedge_waits_for_the_e2e_of_non_streamed_answers() -> None:
    """Its first content is its whole answer: hedged at the E2E percentile, not the TTFT one
    (which would hedge nearly every non-streamed request)."""
    store, _ = _mixed_store()
    delays = HedgeDelays(store, percentile=0.88)
    streamed, whole = delays("A", "chat", 16, True), delays("A", "chat", 16, False)
    assert streamed is not None and streamed < 0.15
    assert whole is not None and 2.0 < whole < 2.3


def test_the_sink_records_non_streamed_answers_and_cut_waits_as_e2e() -> None:
    """`StatsSink` tells the store whether the request streamed: a non-streamed answer lands in
    the E2E sketch, and one its client's deadline cut before it answered is an E2E lower bound
    (its age), not a TTFT."""
    from router.errors import ProviderTimeoutError

    store = LocalStatsStore()
    sink = StatsSink(store, SloTracker({}))
    for i in range(20):
        start = time.perf_counter()
        if i % 2:
            attempt = AttemptRecord("A", 1, start, "first", "won", first_content_at=start + 1.5,
                                    ended_at=start + 1.5)
            sink.record(Outcome(request_id="r", tenant="t", requested_model="auto", stream=False,
                                arrived_at=start, task="chat", deployment="A",
                                first_content_at=start + 1.5, last_token_at=start + 1.5,
                                ended_at=start + 1.5, prompt_tokens=10, completion_tokens=80,
                                attempts=[attempt]))
        else:
            cut = AttemptRecord("A", 1, start, "first", "failed", ended_at=start + 2.0)
            cut.error = ProviderTimeoutError("during the upstream attempt",
                                             code="deadline_exceeded")
            sink.record(Outcome(request_id="r", tenant="t", requested_model="auto", stream=False,
                                arrived_at=start, task="chat", deployment="A", status=504,
                                error_type="ProviderTimeoutError", ended_at=start + 2.0,
                                attempts=[cut]))
    assert store.ttft_quantiles("A", "chat", (0.5,)) == (None, 0.0)
    found, weight = store.e2e_quantiles("A", "chat", (0.25, 0.75))
    assert weight >= 19.9 and found is not None
    assert found[0] == pytest.approx(1.5, rel=0.02) and found[1] == pytest.approx(2.0, rel=0.02)


async def test_the_runner_tells_the_store_which_attempts_are_not_streamed() -> None:
    """`Plan.stream` reaches the attempt watch: while a non-streamed attempt waits for its
    answer the store shows it apart, never as a first token waited for; once answered, it is
    gone."""
    import asyncio

    from router.execution.plan import ExecutionState, Plan
    from router.execution.runner import Runner
    from router.providers.base import Completion, Deployment, UpstreamCall

    answered = asyncio.Event()

    class Slow:
        async def complete(self, call: UpstreamCall) -> Completion:
            await answered.wait()
            return Completion(body=b'{"choices": []}', usage=None)

    store = LocalStatsStore()
    state = ExecutionState.create()
    state.watch = store
    runner = Runner({"openai_passthrough": Slow()}, state)  # type: ignore[dict-item]
    deployment = Deployment(name="A", model="openai/a", adapter="openai_passthrough",
                            api_base="http://127.0.0.1:9/v1", api_key=None,
                            input_price_per_mtok=1.0, output_price_per_mtok=1.0,
                            context_window=None)
    plan = Plan(deployments=[deployment], body={"messages": []},
                deadline=time.perf_counter() + 30.0, prompt_tokens=16, stream=False)
    task = asyncio.create_task(runner.complete(plan, []))
    await asyncio.sleep(0.05)
    view = store.view("A", "chat", 16)
    assert view.in_flight == 1 and view.oldest_waiting_since is None
    assert view.oldest_unstreamed_since is not None
    answered.set()
    await task
    assert store.view("A", "chat", 16)[4:] == (0, None, None)
