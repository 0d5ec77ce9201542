"""The library end to end: assigner → outcomes in a store → analysis, halts and reassignment.

A seeded request loop plays the service: assign the unit, draw the outcome of the serving
arm, record it (and feedback), and every batch run the guardrails and the sequential test as
the service's timer would.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np

from policies.experiments.assignment import Assigner, UnitIds
from policies.experiments.schema import ExperimentSpec
from router.experiments.analysis import analyze, sequential_tests
from router.experiments.monitor import enforce_guardrails, halted_arms
from router.experiments.outcomes import Exposure, Feedback, Halt, MemoryOutcomeStore, Outcome
from tests.experiments.support import TTFT_LOG_SD, TTFT_MEDIAN_MS, make_spec

NOW = datetime(2025, 6, 1, tzinfo=UTC)
WINDOW = 200
ONSET = 300  # the degrading arm's outcome count from which it misbehaves
HEALTHY_ERRORS, BROKEN_ERRORS = 0.02, 0.30
HEALTHY_THUMBS, BROKEN_THUMBS = 0.85, 0.40


@dataclass(frozen=True)
class Behaviour:
    """How an arm behaves before and after `ONSET` of its own outcomes."""

    ttft_median_ms: float
    errors_after_onset: float = HEALTHY_ERRORS
    thumbs_after_onset: float = HEALTHY_THUMBS


async def _serve(spec: ExperimentSpec, store: MemoryOutcomeStore, behaviours: dict[str, Behaviour],
                 requests: int, rng: np.random.Generator, start: int = 0) -> None:
    """Play `requests` requests from a pool of 400 users, checking guardrails every 20."""
    assigner, counts = Assigner([spec]), {arm.name: 0 for arm in spec.arms}
    halted = await halted_arms(store, [spec])  # a (re)started replica reads the halts first
    snapshot = await store.snapshot(spec.name)
    counts.update({name: data.requests for name, data in snapshot.arms.items()})
    for i in range(start, start + requests):
        units = UnitIds(request=f"req-{i}", user=f"user-{rng.integers(400)}")
        assignment = assigner.assign("chat", units, NOW, halted)
        assert assignment is not None
        arm, behaviour = assignment.arm, behaviours[assignment.arm]
        broken = counts[arm] >= ONSET
        error = rng.random() < (behaviour.errors_after_onset if broken else HEALTHY_ERRORS)
        ttft = float(rng.lognormal(np.log(behaviour.ttft_median_ms), TTFT_LOG_SD))
        await store.record(Outcome(spec.name, arm, units.request, error=error, ttft_ms=ttft))
        counts[arm] += 1
        thumbs = behaviour.thumbs_after_onset if broken else HEALTHY_THUMBS
        if not error:
            value = float(rng.random() < thumbs)
            await store.record_feedback(await _exposure(store, units.request),
                                        Feedback(units.request, "thumbs_up", value))
        if i % 20 == 19:
            await enforce_guardrails(spec, store, NOW)
            halted = await halted_arms(store, [spec])


async def _exposure(store: MemoryOutcomeStore, request_id: str) -> Exposure:
    found = await store.exposure(request_id)
    assert found is not None
    return found


def _guarded_spec() -> ExperimentSpec:
    return make_spec(
        arms=[
            {"name": "control", "route": "policy:chat", "control": True, "share": 0.4},
            {"name": "flaky", "route": "model:flaky", "share": 0.3},
            {"name": "steady", "route": "model:steady", "share": 0.3},
        ],
        guardrails=[
            {"kind": "error_rate", "max_rate": 0.05, "min_sample": 50, "window": WINDOW},
            {"kind": "quality_floor", "metric": "thumbs_up", "floor": 0.7, "min_sample": 50,
             "window": WINDOW},
        ],
    )


async def _halt_after_breaking(broken: Behaviour) -> tuple[MemoryOutcomeStore, Halt, int]:
    spec, store = _guarded_spec(), MemoryOutcomeStore(random.Random(0))
    behaviours = {"control": Behaviour(TTFT_MEDIAN_MS), "flaky": broken,
                  "steady": Behaviour(TTFT_MEDIAN_MS)}
    await _serve(spec, store, behaviours, 3000, np.random.default_rng(11))
    snapshot = await store.snapshot(spec.name)
    assert snapshot.halted == {"flaky"}, snapshot.halts
    flaky_count = snapshot.arm("flaky").requests
    await _serve(spec, store, behaviours, 1000, np.random.default_rng(12), start=3000)
    return store, snapshot.halts[0], flaky_count


async def test_arm_breaking_error_guardrail_is_halted_within_window_and_traffic_returns() -> None:
    """Errors jump to 30% at outcome 300: halted within 200 outcomes; no traffic after halt."""
    store, halt, flaky_count = await _halt_after_breaking(
        Behaviour(TTFT_MEDIAN_MS, errors_after_onset=BROKEN_ERRORS))
    assert halt.guardrail == "error_rate"
    assert ONSET < halt.at_sample <= ONSET + WINDOW
    assert halt.at_sample == flaky_count  # no outcome reached the arm after its halt
    after = await store.snapshot("chat-cheaper")
    assert after.arm("flaky").requests == flaky_count
    assert after.arm("steady").requests > 0


async def test_arm_breaking_quality_floor_is_halted_within_window_and_traffic_returns() -> None:
    """Thumbs-up falls to 40% at outcome 300: halted within 200 feedbacks, control takes over."""
    store, halt, flaky_count = await _halt_after_breaking(
        Behaviour(TTFT_MEDIAN_MS, thumbs_after_onset=BROKEN_THUMBS))
    assert halt.guardrail == "quality_floor"
    assert ONSET < flaky_count <= ONSET + WINDOW  # outcomes served before the halt
    assert halt.at_sample <= flaky_count  # feedback values never outnumber outcomes
    assert (await store.snapshot("chat-cheaper")).arm("flaky").requests == flaky_count


async def test_store_and_analysis_detect_a_faster_arm_end_to_end() -> None:
    """Through assigner, store and analyze, a 20% faster arm is found faster with a CI < 0."""
    spec = make_spec(unit="request")
    store = MemoryOutcomeStore(random.Random(0))
    behaviours = {"control": Behaviour(TTFT_MEDIAN_MS), "cheap": Behaviour(TTFT_MEDIAN_MS * 0.8)}
    rng, served, primary = np.random.default_rng(5), 0, None
    while primary is None or not primary.reject:
        await _serve(spec, store, behaviours, 20, rng, start=served)
        served += 20
        data = await store.snapshot(spec.name)
        primary = next(r for r in sequential_tests(spec, data) if r.metric == "ttft_ms")
        assert served <= 1500, "not detected"
    analysis = analyze(spec, data, now=NOW, rng=np.random.default_rng(0), resamples=500)
    p50 = next(c.interval for c in analysis.comparisons if (c.metric, c.interval.statistic)
               == ("ttft_ms", "p50"))
    assert primary.estimate < 0 and primary.high < 0
    assert p50.difference < 0
    assert analysis.decided == {"cheap"}


async def test_a_request_the_policy_bars_from_the_arms_model_is_no_failure_of_the_arm() -> None:
    """Answered by control's route because the policy bars the arm's model from the request
    (a risk rule): not the arm failing, so no error counts against it and its guardrail cannot
    halt a healthy arm (it did: every high-risk request hashed to the arm counted as an error);
    nor a success of the arm (it was one, diluting a failing arm's error rate): the arm has no
    outcome of it, and it is counted as barred. An arm whose model is down still fails."""
    from router.experimentation import Experiments, memory_store
    from router.outcomes import Outcome as RequestOutcome

    store = memory_store()
    trials = Experiments((), store)
    for request_id, ineligible in (("barred", True), ("down", False)):
        trials.record(RequestOutcome(request_id=request_id, tenant="t", requested_model="auto",
                                     stream=False, arrived_at=0.0, ended_at=0.2, experiment="e",
                                     arm="b", routed=True, arm_degraded=True,
                                     arm_ineligible=ineligible))
    errors = (await store.snapshot("e")).arm("b").samples("error")
    for _ in range(100):  # the records are written in the background
        if errors.count >= 1:
            break
        await asyncio.sleep(0.01)
        errors = (await store.snapshot("e")).arm("b").samples("error")
    await asyncio.sleep(0.05)  # anything else spawned has run by now
    snapshot = await store.snapshot("e")
    errors = snapshot.arm("b").samples("error")
    assert errors.count == 1 and errors.total == 1.0
    assert snapshot.barred == {"b": 1}  # counted, for the report's selection check


async def test_an_arms_latencies_are_those_of_its_answers_and_streams_alone_have_a_ttft(
        ) -> None:
    """A failed request has no latency of the arm (an arm failing in 6 ms read as four times
    faster in E2E), and a whole answer has no TTFT (its first content is all of it: an arm that
    answers sooner but starts later read twice as fast, and a TTFT guardrail halted a healthy
    arm; the A/B audit of 2026-12-07). A stream answered, and one its client left or its
    client's own deadline cut before the first token (censored; no error), keep theirs."""
    from router.experimentation import Experiments, memory_store
    from router.outcomes import Outcome as RequestOutcome

    store = memory_store()
    trials = Experiments((), store)
    cases = {  # request id: (stream, status, first token after, client left)
        "streamed": (True, 200, 0.05, False),
        "whole": (False, 200, 0.2, False),
        "failed": (True, 503, None, False),
        "left": (True, 499, None, True),
    }
    cut = RequestOutcome(  # its client's own deadline (an SDK timeout) cut it: no arm error
        request_id="cut", tenant="t", requested_model="auto", stream=True, arrived_at=0.0,
        ended_at=0.3, experiment="e", arm="b", routed=True, status=504,
        error_code="deadline_exceeded", deadline_from_client=True)
    trials.record(cut)
    for request_id, (stream, status, first, left) in cases.items():
        trials.record(RequestOutcome(
            request_id=request_id, tenant="t", requested_model="auto", stream=stream,
            arrived_at=0.0, ended_at=0.2, experiment="e", arm="b", routed=True, status=status,
            first_token_at=first, first_content_at=first, client_disconnected=left))
    for _ in range(100):  # the records are written in the background
        if (await store.snapshot("e")).arm("b").samples("error").count == len(cases) + 1:
            break
        await asyncio.sleep(0.01)
    arm = (await store.snapshot("e")).arm("b")
    assert arm.samples("error").count == 5 and arm.samples("error").total == 1.0
    assert arm.samples("ttft_ms").count == 3  # the answered stream, the left and cut ones
    assert arm.samples("e2e_ms").count == 4  # all but the failure


async def test_reading_a_report_does_not_stall_the_event_loop() -> None:
    """`GET /v1/experiments` bootstraps every comparison from full reservoirs (a few hundred
    ms of numpy per experiment): the service's requests, on the same event loop, must not
    wait for it. It ran on the loop, so each read of the report stalled every request in
    flight for as long as the report took (and the experiment's own TTFT recorded it)."""
    from router.experimentation import Experiments

    spec = make_spec()
    store = MemoryOutcomeStore(random.Random(3))
    rng = random.Random(4)
    for i in range(9000):  # both arms' reservoirs full (4,000 values each)
        await store.record(Outcome(spec.name, ("control", "cheap")[i % 2], f"r{i}", error=False,
                                   ttft_ms=rng.lognormvariate(5.0, 0.5), tpot_ms=20.0,
                                   e2e_ms=rng.lognormvariate(6.0, 0.5), cost_usd=1e-3))
    trials = Experiments([spec], store)
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:  # what a request in flight sees: how long the loop was away
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)
    started = time.perf_counter()
    (report,) = await trials.reports(spec.name)
    took = time.perf_counter() - started
    done.set()
    await ticker
    assert report["arms"][0]["requests"] == 4500 and report["comparisons"]
    print(f"\nreport took {took:.3f} s; the loop was away at most {max(gaps):.3f} s")
    assert max(gaps) < took / 2, (max(gaps), took)
