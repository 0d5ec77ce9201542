"""Per-task SLOs: rolling attainment, burn rates, demotion, and the `/v1/slo` snapshot."""

from __future__ import annotations

import itertools
import math
import random
import time

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.scoring import Candidate, ScoreRequest, ScoringConfig, rank
from router.slo import SloTargets, SloTracker, burn_rate, demotion_penalty
from router.slo.targets import SLIS
from router.slo.tracker import SeriesKey, SloConfig
from router.slo.windows import (
    COARSE_RESOLUTION_S,
    FINE_UP_TO_S,
    RollingCounts,
    TieredCounts,
    column,
)
from router.stats import LocalStatsStore, Observation
from tests.stats.sim import FakeClock

ALL_SLIS = SloConfig(demote_on=SLIS)  # demotion on every SLI, to test the mechanics
CHAT = SloTargets(ttft_p95_s=1.0, tpot_p95_s=0.05, e2e_p99_s=5.0, availability=0.99)


def _obs(dep: str, ttft: float, t: float, error: str | None = None) -> Observation:
    return Observation(dep, "chat", 500, 20, None if error else ttft, 0.02, ttft + 0.4, 0.0,
                       error, False, t)


def _feed(tracker: SloTracker, dep: str, ttft: float, start: float, seconds: int,
          rate: int = 2) -> None:
    for i in range(seconds * rate):
        obs = _obs(dep, ttft, start + i / rate)
        tracker.record_request(obs)
        tracker.record_attempt(obs)


@given(bad=st.integers(0, 1000), extra=st.integers(1, 1000),
       objective=st.sampled_from((0.9, 0.95, 0.99, 0.999)))
def test_burn_rate_is_bad_share_over_budget(bad: int, extra: int, objective: float) -> None:
    """burn * (1 - objective) equals the bad share; burn 1 spends the budget exactly."""
    total = bad + extra
    burn = burn_rate(bad, total, objective)
    assert burn is not None and burn * (1 - objective) == pytest.approx(bad / total)


def test_rolling_counts_forget_events_outside_the_window() -> None:
    """An event older than the window is not summed; a recent one is."""
    counts = RollingCounts(horizon_s=600, resolution_s=10)
    deltas = [0] * 8
    deltas[column("ttft")], deltas[column("ttft") + 1] = 1, 1
    counts.add(1000.0, deltas)
    counts.add(1500.0, deltas)
    short, long_ = counts.sums(1500.0, (300.0, 600.0))
    assert (int(short[column("ttft")]), int(long_[column("ttft")])) == (1, 2)


def test_rolling_counts_drop_an_event_older_than_the_ring() -> None:
    """An event a whole ring older than the current slot is not counted and wipes nothing."""
    counts = RollingCounts(horizon_s=600, resolution_s=10)  # 61 slots
    deltas = [1] + [0] * 7
    counts.add(10_000.0, deltas)
    counts.add(10_000.0 - 610, deltas)  # the same ring position, 61 slots earlier
    assert [int(s[0]) for s in counts.sums(10_000.0, (30.0, 600.0))] == [1, 1]


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(),
                                st.one_of(st.sampled_from((-15.0, -5.0, 0.0, 25.0, 305.0, 605.0)),
                                          st.floats(-120.0, 700.0)),
                                st.integers(0, 7),
                                st.sampled_from((0.0, 1.0, 9.0, 10.0, 65.0, 700.0))),
                      min_size=1, max_size=60))
def test_rolling_counts_kept_sums_equal_a_fresh_scan(
        steps: list[tuple[bool, float, int, float]]) -> None:
    """The sums kept between reads (updated by each event) always equal summing the slots
    afresh: events now, in past slots, later than the last read, older than the ring holds
    (dropped: they once wiped the current slot), and reads that move time."""
    counts = RollingCounts(horizon_s=600, resolution_s=10)
    added: list[tuple[float, list[int]]] = []
    windows = (30.0, 300.0, 600.0)
    now = 10_000.0
    for is_read, offset, col, advance in steps:
        if is_read:
            now += advance
            fresh = RollingCounts(horizon_s=600, resolution_s=10)  # no sums kept: a scan
            for t, deltas in added:
                fresh.add(t, deltas)
            kept = counts.sums(now, windows)
            assert kept == fresh.sums(now, windows)
        else:
            deltas = [0] * 8
            deltas[col] = 1
            added.append((now - offset, deltas))
            counts.add(now - offset, deltas)


# The windows a tracker's series are summed over: the rules' and the last minute.
SERIES_WINDOWS = (60.0, 300.0, 1800.0, 3600.0, 21600.0)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.floats(-23_000.0, 30.0),
                                st.integers(0, 7), st.sampled_from((0.0, 7.0, 10.0, 60.0, 1800.0))),
                      min_size=1, max_size=80),
       asked=st.sampled_from((SERIES_WINDOWS, (300.0, 1800.0, 3600.0, 21600.0), (3600.0, 60.0))))
def test_tiered_counts_sum_each_window_over_its_own_slots(
        steps: list[tuple[bool, float, int, float]], asked: tuple[float, ...]) -> None:
    """Every window's sums count exactly the events of its last whole slots back from the
    current one: 10 s slots up to 30 minutes, 1 min slots beyond (events up to 6 h old, in any
    order, reads that move time, windows asked in any order or a subset)."""
    counts = TieredCounts(SERIES_WINDOWS, resolution_s=10.0)
    events: list[tuple[float, int]] = []
    now = 1_000_000.0
    for is_read, offset, col, advance in steps:
        if not is_read:
            deltas = [0] * 8
            deltas[col] = 1
            events.append((now + offset, col))
            counts.add(now + offset, deltas)
            continue
        now += advance
        for window, sums in zip(asked, counts.sums(now, asked), strict=True):
            res = 10.0 if window <= FINE_UP_TO_S else COARSE_RESOLUTION_S
            current, slots = math.floor(now / res), math.ceil(window / res)
            expected = [0] * 8
            for t, c in events:
                if 0 <= current - math.floor(t / res) < slots:
                    expected[c] += 1
            assert sums == expected, window


def test_a_read_behind_the_newest_event_keeps_its_windows_oldest_slot() -> None:
    """A read whose `now` lags an event counted after it (a refresh pass's time, another
    clock's read) still counts its window's oldest slot: a ring of exactly the 30 minutes
    reused that slot for an event 20 s ahead (the re-audit of 2026-12-07)."""
    counts = TieredCounts(SERIES_WINDOWS, resolution_s=10.0)
    now, deltas = 1_000_000.0, [1] + [0] * 7
    counts.add(now - 1785.0, deltas)  # 179 slots back: the 30-minute window's oldest
    counts.add(now + 25.0, deltas)  # counted by a request whose clock read came later
    assert [s[0] for s in counts.sums(now, (1800.0, 3600.0))] == [1, 1]


def test_a_series_holds_its_six_hours_in_22_kb() -> None:
    """The rings a tracker keeps per (task, deployment, prompt size): one 6 h ring of 10 s
    slots held 156 KB in 64-bit counts (a router with 792 series, 122 MB), and would hold 86 KB
    in 32-bit ones; 10 s slots up to 30 minutes and 1 min slots beyond (each a minute more
    than its longest window) hold 22 KB."""
    config = SloConfig()
    windows = (*config.windows_s, config.current_s)
    assert TieredCounts(windows, config.resolution_s).nbytes <= 22_000
    assert RollingCounts(max(windows), config.resolution_s).nbytes > 86_000


def test_slo_no_candidate_can_meet_shows_low_attainment_and_burn_above_one() -> None:
    """With every request slower than the TTFT target, attainment < 0.95 and burn > 1."""
    clock = FakeClock()
    tracker = SloTracker({"chat": CHAT}, ALL_SLIS, clock=clock)
    _feed(tracker, "A", 2.0, clock.now, 600)
    clock.now += 600
    snap = tracker.snapshot()
    chat = next(t for t in snap.tasks if t.task == "chat")
    ttft_5m = next(s for w in chat.windows if w.window_s == 300 for s in w.slis if s.sli == "ttft")
    assert ttft_5m.attainment is not None and ttft_5m.attainment < ttft_5m.objective
    assert ttft_5m.burn_rate is not None and ttft_5m.burn_rate > 1.0 and ttft_5m.met is False
    assert chat.burn_alerts and chat.deployments[0].demoted
    assert orjson.loads(snap.model_dump_json())["tasks"][0]["task"] == "chat"


def test_a_snapshot_without_deployments_has_the_same_task_windows() -> None:
    """What the SLO gauges read at each scrape and export: the tasks' windows and alerts,
    without the deployments' series (most of a snapshot's cost: 14 ms at 803 series on the
    slow VM, twice a scrape), and equal to the full snapshot's."""
    clock = FakeClock()
    tracker = SloTracker({"chat": CHAT}, ALL_SLIS, clock=clock)
    _feed(tracker, "A", 2.0, clock.now, 300)
    _feed(tracker, "B", 0.1, clock.now, 300)
    clock.now += 600
    full, tasks_only = tracker.snapshot(), tracker.snapshot(deployments=False)
    assert [d.deployment for d in full.tasks[0].deployments] == ["A", "B"]
    assert all(not task.deployments for task in tasks_only.tasks)
    assert [(t.task, t.windows, t.burn_alerts) for t in tasks_only.tasks] == [
        (t.task, t.windows, t.burn_alerts) for t in full.tasks]


def test_demotion_fires_on_both_windows_and_lifts_after_recovery() -> None:
    """A burning deployment is demoted; after 5 good minutes the short window lifts it."""
    clock = FakeClock()
    tracker = SloTracker({"chat": CHAT}, ALL_SLIS, clock=clock)
    start = clock.now
    _feed(tracker, "A", 0.3, start, 1200)
    _feed(tracker, "A", 3.0, start + 1200, 600)
    assert tracker.penalty("A", "chat", 500, start + 1800) > 0.0
    _feed(tracker, "A", 0.3, start + 1800, 400)
    assert tracker.penalty("A", "chat", 500, start + 2200) == 0.0


def test_a_non_streamed_answer_is_judged_on_e2e_not_on_ttft() -> None:
    """A non-streamed answer's first content is the whole answer: 3 s there is its generation
    time, not a first token 3x over the 1 s TTFT target. Such answers count for E2E (5 s target,
    met) and availability only, and demote no one; streamed alike, they do (it demoted
    deployments that met the TTFT target for every stream)."""
    from router.slo import event_deltas

    slow_whole = _obs("A", 3.0, 0.0)
    deltas = event_deltas(slow_whole, CHAT, streamed=False)
    assert deltas[column("ttft")] == deltas[column("tpot")] == 0  # not counted at all
    assert (deltas[column("e2e")], deltas[column("e2e") + 1]) == (1, 0)
    assert (deltas[column("availability")], deltas[column("availability") + 1]) == (1, 0)
    clock = FakeClock()
    whole, streamed = (SloTracker({"chat": CHAT}, ALL_SLIS, clock=clock) for _ in range(2))
    start = clock.now
    for i in range(1200):
        obs = _obs("A", 3.0, start + i / 2)
        whole.record_request(obs, streamed=False)
        whole.record_attempt(obs, streamed=False)
        streamed.record_request(obs)
        streamed.record_attempt(obs)
    assert whole.penalty("A", "chat", 500, start + 600) == 0.0
    assert streamed.penalty("A", "chat", 500, start + 600) > 0.0


def test_rules_cannot_fire_on_too_few_events() -> None:
    """Below min_events in the short window, even a 100% bad series is not demoted."""
    clock = FakeClock()
    tracker = SloTracker({"chat": CHAT}, clock=clock)
    for i in range(5):
        tracker.record_attempt(_obs("A", 3.0, clock.now + i))
    assert tracker.penalty("A", "chat", 500, clock.now + 10) == 0.0


def test_demotion_penalty_is_zero_unless_both_windows_burn() -> None:
    """Only the short window burning (a blip) does not demote; both burning does."""
    assert demotion_penalty([{3600.0: 2.0, 300.0: 50.0}]) == 0.0
    assert demotion_penalty([{3600.0: 20.0, 300.0: 50.0}]) > 0.0


def test_a_demotion_lifts_once_the_few_answers_it_still_gets_are_good() -> None:
    """A deployment warmed up for 20 s fails for a few seconds: 11 errors in about 215
    attempts burn a 99.5% availability budget past the 6 h / 30 min rule. Demoted, it gets
    only exploration's few requests, which could not dilute that share: the demotion held
    itself up until the errors left the 30 min window. Now it holds only while the last minute
    burns too: it stays while the few answers it gets fail, and lifts a minute after they are
    good again."""
    clock = FakeClock()
    targets = SloTargets(ttft_p95_s=1.0, availability=0.995)  # the simulator default's
    tracker = SloTracker({"chat": targets}, SloConfig(demote_on=("availability",)), clock=clock)
    start = clock.now
    _feed(tracker, "A", 0.3, start, 20, rate=10)

    def attempt(t: float, error: str | None = None) -> None:
        tracker.record_attempt(_obs("A", 0.3, t, error))

    for i in range(11):
        attempt(start + 20 + i * 0.2, "ProviderUnavailableError")
    assert tracker.penalty("A", "chat", 500, start + 23) > 0.0
    for n in range(20):  # still failing: exploration's one request every 3 s fails
        attempt(start + 25 + 3 * n, "ProviderUnavailableError")
        assert tracker.penalty("A", "chat", 500, start + 25.5 + 3 * n) > 0.0
    recovered = start + 85
    for n in range(30):  # recovered: the same trickle now succeeds
        attempt(recovered + 3 * n)
    assert tracker.penalty("A", "chat", 500, recovered + 75) == 0.0
    assert tracker.penalty("A", "chat", 500, recovered + 600) == 0.0


def test_scorer_ranks_a_demoted_candidate_behind_an_equal_one() -> None:
    """Of two otherwise equal candidates, the one with an SLO penalty ranks second."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(100):
        for dep in ("A", "B"):
            store.record(_obs(dep, 0.3, clock.now + i * 0.01))
    clock.now += 2
    views = {d: store.view(d, "chat", 500) for d in ("A", "B")}
    candidates = [Candidate("A", 1.0, 1.0, views["A"], slo_penalty=0.6),
                  Candidate("B", 1.0, 1.0, views["B"])]
    ranking = rank(ScoreRequest("chat", "low", 500, 20), CHAT, candidates,
                   ScoringConfig(explore_share=0.0), now=clock.now, rng=random.Random(1))
    assert [c.deployment for c in ranking.candidates] == ["B", "A"]
    assert ranking.candidates[1].demoted


def test_demotion_can_be_limited_to_availability() -> None:
    """With `demote_on=("availability",)` a TTFT burn does not demote a deployment for the
    whole task; an availability burn does."""
    clock = FakeClock()
    tracker = SloTracker({"chat": CHAT}, SloConfig(demote_on=("availability",)), clock=clock)
    _feed(tracker, "A", 3.0, clock.now, 1200)
    assert tracker.penalty("A", "chat", 500, clock.now + 1200) == 0.0
    for i in range(600):
        tracker.record_attempt(Observation.from_timings(
            deployment="B", task="chat", prompt_tokens=10, output_tokens=0,
            t_start=clock.now + i, t_first_token=None, t_last_token=None, t_end=clock.now + i,
            error="ProviderUnavailableError"))
    assert tracker.penalty("B", "chat", 500, clock.now + 600) > 0.0


def test_a_latency_burn_demotes_only_at_the_prompt_size_where_it_burns() -> None:
    """A deployment too slow on 8k-token prompts is demoted for them and not for short ones
    (its prefill is the cause); an availability burn demotes it at every size. The snapshot
    shows both, per prompt size."""
    clock = FakeClock()
    tracker = SloTracker({"chat": CHAT}, clock=clock)
    start = clock.now
    for i in range(1200):
        t = start + i
        for prompt, ttft in ((16, 0.2), (8000, 2.5)):
            tracker.record_attempt(Observation("A", "chat", prompt, 20, ttft, 0.02, ttft + 0.4,
                                               0.0, None, False, t))
    now = start + 1200
    assert tracker.penalty("A", "chat", 8000, now) > 0.0
    assert tracker.penalty("A", "chat", 16, now) == 0.0
    chat = next(t for t in tracker.snapshot(now).tasks if t.task == "chat")
    (a,) = chat.deployments
    assert a.demoted and a.penalty == a.penalty_by_prompt_tokens["2048-8191"] > 0.0
    assert a.penalty_by_prompt_tokens["0-511"] == 0.0
    for i in range(600):
        tracker.record_attempt(Observation("A", "chat", 16, 0, None, None, 0.1, 0.0,
                                           "ProviderUnavailableError", False, now + i))
    assert tracker.penalty("A", "chat", 16, now + 600) > 0.0


def _count_penalty_computations(tracker: SloTracker) -> list[SeriesKey]:
    """The keys whose penalty `tracker` computes from now on, in order (appended as it goes)."""
    computed: list[SeriesKey] = []
    original = tracker._penalty_of

    def counting(key: SeriesKey, now: float) -> float:
        computed.append(key)
        return original(key, now)

    tracker._penalty_of = counting  # type: ignore[method-assign]
    return computed


async def test_background_refresh_recomputes_only_what_requests_read() -> None:
    """After new events, keys read since the last pass are recomputed in the background; keys
    nobody read are not, and with no new events there is no pass."""
    import asyncio

    tracker = SloTracker({"chat": CHAT}, SloConfig(refresh_s=0.02))
    computed = _count_penalty_computations(tracker)
    tracker.penalty("a", "chat", 500, 0.0)  # the read computes it (nothing cached yet)
    assert computed == [("chat", "a", 0)]
    task = asyncio.create_task(tracker.run_refresher())
    await asyncio.sleep(0.005)
    assert computed == [("chat", "a", 0)]  # no new event: no pass
    tracker.record_attempt(_obs("b", 0.2, time.time()))  # an event (on a key nobody read)
    await asyncio.sleep(0.005)  # one pass: recomputes the key read above, not "b"
    assert computed == [("chat", "a", 0), ("chat", "a", 0)]
    tracker.record_attempt(_obs("b", 0.2, time.time()))
    await asyncio.sleep(0.05)  # a pass, but nothing was read since the last: nothing computed
    task.cancel()
    assert computed == [("chat", "a", 0), ("chat", "a", 0)]


def test_a_refresh_with_a_budget_stops_and_leaves_the_rest_to_the_next_pass() -> None:
    """A pass stops once its budget is spent (here: one key's worth of a clock that moves 1 ms
    per reading); the keys it did not reach are recomputed by the next pass, none twice."""
    ticks = itertools.count()
    tracker = SloTracker({"chat": CHAT}, clock=lambda: next(ticks) * 0.001)
    computed = _count_penalty_computations(tracker)
    for dep in ("a", "b", "c"):
        tracker.penalty(dep, "chat", 500, 0.0)
    computed.clear()
    tracker.refresh(1.0, budget_s=0.001)
    assert len(computed) == 1
    tracker.refresh(2.0, budget_s=0.001)
    tracker.refresh(3.0, budget_s=0.001)
    assert sorted(computed) == [("chat", d, 0) for d in ("a", "b", "c")]
    tracker.refresh(4.0)  # nothing read since: nothing to do
    assert len(computed) == 3


async def test_refresher_sleeps_until_an_event_and_spaces_its_passes() -> None:
    """An idle tracker's refresher never wakes (no timer); a recorded event wakes it at once
    (on a quiet service, in the same wake-up); while events keep coming, passes are at least
    `refresh_s / 2` apart."""
    import asyncio

    tracker = SloTracker({"chat": CHAT}, SloConfig(refresh_s=0.04))
    passes: list[float] = []
    original = tracker.refresh

    def counting(now: float, budget_s: float | None = None) -> None:
        passes.append(time.perf_counter())
        original(now, budget_s)

    tracker.refresh = counting  # type: ignore[method-assign]
    task = asyncio.create_task(tracker.run_refresher())
    try:
        await asyncio.sleep(0.2)  # nothing recorded: no pass at all
        assert passes == []
        tracker.record_attempt(_obs("a", 0.2, time.time()))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(passes) == 1  # woken by the event, no timer in between
        for _ in range(10):  # events every 5 ms for 50 ms
            tracker.record_attempt(_obs("a", 0.2, time.time()))
            await asyncio.sleep(0.005)
        assert 2 <= len(passes) < 11  # not one per event
        gaps = [b - a for a, b in itertools.pairwise(passes)]
        assert min(gaps) >= 0.019  # spaced by refresh_s / 2
    finally:
        task.cancel()


def test_a_blip_of_a_few_errors_does_not_demote_but_a_steady_error_rate_does() -> None:
    """Three errors in 52 requests (a half-second outage at 100 req/s) burn a 99.5% budget at
    11.5 by the point estimate: demoted on that, the deployment kept ~3% of its traffic for
    minutes, too little to dilute them. Demotion reads the burn beyond chance (a Wilson lower
    bound: 4 here); a steady 10% of errors is still demoted."""
    targets = SloTargets(ttft_p95_s=1.0, availability=0.995)
    clock = FakeClock()
    tracker = SloTracker({"chat": targets}, clock=clock)
    for i in range(52):
        obs = _obs("A", 0.3, clock.now + i * 0.01, error="ProviderUnavailableError"
                   if i in (20, 21, 22) else None)
        tracker.record_attempt(obs)
    assert tracker.penalty("A", "chat", 500, clock.now + 1) == 0.0
    steady = SloTracker({"chat": targets}, clock=clock)
    for i in range(400):
        obs = _obs("B", 0.3, clock.now + i * 0.5, error="ProviderUnavailableError"
                   if i % 10 == 0 else None)
        steady.record_attempt(obs)
    assert steady.penalty("B", "chat", 500, clock.now + 200) > 0.0


def test_the_service_entry_counts_every_request_and_its_burn_fires() -> None:
    """`record_service` counts requests whether or not they had a task (the router's own
    refusals have none) in the snapshot's `all` entry, held to its availability objective;
    20 failures in 100 burn a 0.995 objective 40 times over, which fires the fast rules. A
    tracker given no service objective has no such entry."""
    now = [1_000.0]
    tracker = SloTracker({"chat": SloTargets(availability=0.99)}, clock=lambda: now[0],
                         service_availability=0.995)
    for i in range(100):
        tracker.record_service(now[0], failed=i % 5 == 0)
    entry = next(t for t in tracker.snapshot().tasks if t.task == "all")
    assert entry.targets.availability == 0.995 and entry.deployments == []
    shortest = min(entry.windows, key=lambda w: w.window_s)
    (sli,) = shortest.slis
    assert (sli.sli, sli.total, sli.bad) == ("availability", 100, 20)
    assert sli.burn_rate == pytest.approx(40.0)
    assert any(alert.startswith("availability") for alert in entry.burn_alerts)
    plain = SloTracker({"chat": SloTargets()})
    plain.record_service(now[0], failed=True)
    assert [t.task for t in plain.snapshot().tasks] == ["chat"]


def test_a_replayed_answer_is_not_counted_again() -> None:
    """An Idempotency-Key's stored answer sent again (a replay) counted in the SLOs at each
    retry: a stored 504 `unknown_commit` retried three times made one incident four failures
    of the availability budget (the re-audit of 2026-12-07). Its request was counted when it
    ran; the replays are not."""
    from router.feedback import StatsSink
    from router.outcomes import Outcome

    now = [1_000.0]
    tracker = SloTracker({"action": SloTargets(availability=0.99)}, clock=lambda: now[0],
                         service_availability=0.99)
    sink = StatsSink(LocalStatsStore(), tracker, wall=lambda: now[0], mono=lambda: now[0])
    for replay in (False, True, True, True):
        outcome = Outcome(request_id="r", tenant="t", requested_model="auto", stream=False,
                          arrived_at=now[0] - 0.5)
        outcome.task, outcome.status, outcome.ended_at = "action", 504, now[0]
        outcome.error_type, outcome.idempotent_replay = "UnknownCommitError", replay
        sink.record(outcome)
    for task in ("action", "all"):
        entry = next(t for t in tracker.snapshot().tasks if t.task == task)
        shortest = min(entry.windows, key=lambda w: w.window_s)
        (sli,) = shortest.slis
        assert (sli.total, sli.bad) == (1, 1), task
