"""The local statistics store: what is kept apart, fallbacks, staleness, in-flight, TTFT model."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace

import orjson
import pytest

from policies.labels import Task
from router.outcomes import Outcome
from router.stats import (
    ANY,
    ANY_BUCKET,
    KeySummary,
    LocalStatsStore,
    Observation,
    StatsConfig,
    TtftModel,
    prompt_bucket,
    tpot_s,
)
from router.stats.codec import decode_state, encode_state
from router.stats.decay import Decay
from tests.stats.sim import FakeClock


def _ok(dep: str, ttft: float, t: float, prompt: int = 300, out: int = 20) -> Observation:
    return Observation(dep, "chat", prompt, out, ttft, 0.02, ttft + 0.02 * (out - 1), 0.0, None,
                       False, t)


def test_tpot_is_undefined_for_one_output_token() -> None:
    """TPOT is None at <= 1 output token and (last - first) / (n - 1) otherwise."""
    assert tpot_s(1.0, 1.0, 1) is None
    assert tpot_s(1.0, 2.0, 11) == pytest.approx(0.1)


def test_tpot_is_undefined_when_every_token_came_in_one_chunk() -> None:
    """Seven tokens in one chunk: no time passed between the first token and the last, which
    says nothing of the time per token (it was recorded as 0 s, pulling the deployment's TPOT
    estimate and the TPOT histogram toward 0), for the statistics and the outcome alike."""
    assert tpot_s(1.0, 1.0, 7) is None
    outcome = Outcome(request_id="r", tenant="t", requested_model="m", stream=True,
                      arrived_at=0.5, first_token_at=1.0, last_token_at=1.0,
                      completion_tokens=7)
    assert outcome.tpot_s is None
    assert replace(outcome, last_token_at=1.6).tpot_s == pytest.approx(0.1)


def test_from_timings_measures_ttft_tpot_and_e2e() -> None:
    """Observation.from_timings derives TTFT, TPOT and E2E from timestamps."""
    obs = Observation.from_timings(deployment="A", task="chat", prompt_tokens=10,
                                   output_tokens=5, t_start=10.0, t_first_token=10.5,
                                   t_last_token=11.3, t_end=11.4)
    assert obs.ttft_s == pytest.approx(0.5)
    assert obs.e2e_s == pytest.approx(1.4)
    assert obs.tpot_s == pytest.approx(0.2)


def test_prompt_buckets_split_at_the_edges() -> None:
    """Bucket edges are upper-exclusive: 511 and 512 fall in neighbouring buckets."""
    assert prompt_bucket(511) + 1 == prompt_bucket(512)
    assert prompt_bucket(0) == 0


def test_cached_and_failed_attempts_stay_out_of_latency_estimates() -> None:
    """Cached answers and failures are counted but never move TTFT quantiles."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for _ in range(50):
        store.record(_ok("A", 0.3, clock.now + 1))
    fast_cached = Observation("A", "chat", 300, 20, 0.001, 0.0, 0.002, 0.0, None, True,
                              clock.now + 1)
    slow_failed = Observation("A", "chat", 300, 0, None, None, 30.0, 0.0, "ProviderTimeout",
                              False, clock.now + 1)
    for _ in range(50):
        store.record(fast_cached)
        store.record(slow_failed)
    clock.now += 2
    view = store.view("A", "chat", 300)
    assert view.bucket is not None and view.bucket.ttft is not None
    assert view.bucket.ttft.p50 == pytest.approx(0.3, rel=0.02)
    assert view.task is not None and view.task.n_cached > 0
    assert view.task.error_rate == pytest.approx(0.5, rel=0.05)
    assert dict(view.task.errors_by_class)["ProviderTimeout"] > 0


def test_view_has_no_bucket_summary_for_unseen_prompt_sizes() -> None:
    """A prompt bucket without data falls back to the coarser levels (bucket is None)."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    store.record(_ok("A", 0.3, clock.now, prompt=100))
    view = store.view("A", "chat", 20_000)
    assert view.bucket is None and view.task is not None and view.deployment_all is not None


def test_reads_reuse_summaries_until_refresh_or_staleness_bound() -> None:
    """Reads return the cached summary; refresh() or the staleness bound bring new data in."""
    clock = FakeClock()
    store = LocalStatsStore(StatsConfig(max_staleness_s=0.5), clock=clock)
    store.record(_ok("A", 0.3, clock.now))
    first = store.view("A", "chat", 300).task
    store.record(_ok("A", 0.3, clock.now))
    assert store.view("A", "chat", 300).task is first
    assert store.refresh() >= 1
    refreshed = store.view("A", "chat", 300).task
    assert refreshed is not first and refreshed is not None and refreshed.n_ok > 1.0
    store.record(_ok("A", 0.3, clock.now))
    clock.now += 1.0
    late = store.view("A", "chat", 300).task
    assert late is not refreshed and late is not None and late.at == clock.now


def test_reads_leave_a_changed_idle_key_to_a_running_refresher() -> None:
    """While refreshes run, a key that decisions keep reading is never recomputed by a read,
    however old its summary: the next refresh brings its new data in. A key read for the first
    time after a pause, or any key once refreshes stop for `max_staleness_s`, is recomputed by
    the read."""
    clock = FakeClock()
    store = LocalStatsStore(StatsConfig(max_staleness_s=0.5), clock=clock)
    store.record(_ok("A", 0.3, clock.now))
    store.record(_ok("B", 0.3, clock.now))
    old_a, old_b = store.view("A", "chat", 300).task, store.view("B", "chat", 300).task
    for _ in range(20):  # no new data for 2 s; decisions read A (not B); refresher running
        clock.now += 0.1
        store.view("A", "chat", 300)
        store.refresh()
    store.record(_ok("A", 0.3, clock.now))  # both summaries now out of date
    store.record(_ok("B", 0.3, clock.now))
    assert store.view("A", "chat", 300).task is old_a  # left to the refresher
    fresh_b = store.view("B", "chat", 300).task  # first read after a pause: recomputed
    assert fresh_b is not old_b and fresh_b is not None and fresh_b.at == clock.now
    clock.now += 0.1
    assert store.refresh() == 3
    new = store.view("A", "chat", 300).task
    assert new is not old_a and new is not None and new.at == clock.now
    store.record(_ok("A", 0.3, clock.now))
    clock.now += 0.5  # no refresh for max_staleness_s: reads recompute again
    late = store.view("A", "chat", 300).task
    assert late is not new and late is not None and late.at == clock.now


def test_refresh_skips_keys_that_no_decision_reads() -> None:
    """Only keys read since the last refresh are recomputed in the background."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    store.record(_ok("A", 0.3, clock.now))
    store.record(_ok("B", 0.3, clock.now))
    store.view("A", "chat", 300)
    store.record(_ok("A", 0.3, clock.now))
    store.record(_ok("B", 0.3, clock.now))
    assert store.refresh() == 3  # A's bucket, task and deployment keys; none of B's


class _TickingClock:
    """A clock that moves `step` seconds each time it is read (a refresh's budget runs out)."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 1000.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_budgeted_refresh_stops_and_the_next_one_starts_where_it_stopped() -> None:
    """Recomputing stops once the budget is spent; the keys left come first in the next
    refresh, so none is left behind however the budget falls, and nothing is done twice."""
    clock = _TickingClock(0.001)
    store = LocalStatsStore(clock=clock)
    deployments = [f"D{i}" for i in range(6)]
    for dep in deployments:
        store.record(_ok(dep, 0.3, clock.now))
        store.view(dep, "chat", 300)
    for dep in deployments:  # every read key changes again: 18 due (3 levels each)
        store.record(_ok(dep, 0.4, clock.now))
    counts = [store.refresh(budget_s=0.0025) for _ in range(12)]
    assert counts[0] < 18 and sum(counts) == 18 and counts[-1] == 0
    assert all(store.view(d, "chat", 300).bucket.n_ok == pytest.approx(2.0, rel=0.01)  # type: ignore[union-attr]
               for d in deployments)


def test_in_flight_counts_and_oldest_waiting_attempt() -> None:
    """begin/first_token/end maintain the count and the oldest attempt still waiting."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    a = store.begin("A", clock.now)
    b = store.begin("A", clock.now + 1)
    store.first_token(a)
    view = store.view("A", "chat", 10)
    assert (view.in_flight, view.oldest_waiting_since) == (2, clock.now + 1)
    store.end(a)
    store.end(b)
    assert store.view("A", "chat", 10).in_flight == 0


def test_load_is_a_live_view_of_the_attempts_in_flight() -> None:
    """Prefix affinity's load: every attempt from begin to end, waiting for a token or not."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    load = store.load
    a1, a2, b = store.begin("A", clock.now), store.begin("A", clock.now), store.begin("B", 0.0)
    store.first_token(a1)
    assert (load.get("A"), load["B"], load.get("C", 0), len(load)) == (2, 1, 0, 2)
    assert dict(load) == {"A": 2, "B": 1} and "C" not in load
    store.end(a1)
    store.end(b)
    store.end(b)  # ending twice changes nothing
    assert dict(load) == {"A": 1} and load.get("B", 0) == 0 and "B" not in load
    store.end(a2)
    assert len(load) == 0


def test_deployment_key_holds_the_ttft_model_and_task_key_the_output_tokens() -> None:
    """The deployment-wide key fits TTFT in prompt tokens; the task-wide key keeps outputs."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    store.record(_ok("A", 0.3, clock.now, out=40))
    clock.now += 1
    d = store.summary(("A", ANY, ANY_BUCKET), clock.now)
    task = store.task_summary("chat")
    assert d is not None and d.ttft_fit is not None
    assert task is not None and task.output_tokens is not None
    assert task.output_tokens.p50 == pytest.approx(40, rel=0.02)


def test_ttft_model_recovers_intercept_slope_and_p95() -> None:
    """On noisy data the fit finds the line and the ratio quantiles cover the p95."""
    rng = random.Random(5)
    model = TtftModel(Decay(60.0), 0.01)
    t = 1_700_000_000.0
    samples = []
    for i in range(3000):
        prompt = rng.randint(100, 16_000)
        ttft = (0.25 + 0.1 * prompt / 1000) * rng.lognormvariate(0.0, 0.2)
        model.add(prompt, ttft, t + i * 0.01)
        samples.append((prompt, ttft))
    fit = model.fit(t + 30)
    assert fit is not None and fit.ratio is not None
    assert fit.slope_s_per_ktok == pytest.approx(0.1 * 1.02, rel=0.15)
    predicted = fit.predict(8000)
    assert predicted is not None
    truth = sorted(y for p, y in samples if 7000 <= p <= 9000)
    assert predicted.p95 == pytest.approx(truth[int(0.95 * len(truth))], rel=0.15)


def test_ttft_model_is_trusted_only_near_the_prompt_sizes_it_was_fitted_on() -> None:
    """A fit on 8k-token prompts alone (slope 0: intercept and slope cannot be told apart)
    holds at 8k, less at 12k, not at all for 16-token prompts; a fit on mixed sizes holds
    across them."""
    t = 1_700_000_000.0
    long_only = TtftModel(Decay(60.0), 0.01)
    for i in range(20):
        long_only.add(8000, 2.5 + 0.01 * (i % 3), t + i)
    fit = long_only.fit(t + 20)
    assert fit is not None and fit.slope_s_per_ktok == 0.0
    assert fit.trust(8000) == 1.0
    assert 0.0 < fit.trust(12_000) < 1.0
    assert fit.trust(16) == 0.0 and fit.trust(1000) == 0.0
    mixed = TtftModel(Decay(60.0), 0.01)
    for i in range(40):
        prompt = 16 if i % 2 else 8000
        mixed.add(prompt, 0.15 + 0.3 * prompt / 1000, t + i)
    fit = mixed.fit(t + 40)
    assert fit is not None
    assert fit.trust(16) == fit.trust(4000) == fit.trust(8000) == 1.0


def _read_key_by_key(store: LocalStatsStore, deployment: str, task: Task,
                     prompt_tokens: int) -> tuple[KeySummary | None, ...]:
    """The three levels read one `summary()` each (what `view()` did before it kept them)."""
    now = store._clock()
    return (store.summary((deployment, task, prompt_bucket(prompt_tokens)), now),
            store.summary((deployment, task, ANY_BUCKET), now),
            store.summary((deployment, ANY, ANY_BUCKET), now))


@pytest.mark.parametrize("seed", range(12))
def test_kept_levels_read_what_summaries_key_by_key_would(seed: int) -> None:
    """`view()` serves the three levels from `_levels` (kept across refreshes); over random
    records, clock steps, refreshes, remote replicas and reads, two stores fed alike (one read
    through `view()`, one key by key through `summary()`) see equal summaries, recompute the
    same keys on reads and in refreshes, and agree on which keys are dirty and read."""
    rng = random.Random(seed)
    stale = rng.choice((0.3, 1.0))
    clocks = FakeClock(), FakeClock()
    stores = [LocalStatsStore(StatsConfig(max_staleness_s=stale), clock=c) for c in clocks]
    other = LocalStatsStore(clock=clocks[0])  # a remote replica's state
    deployments = ("A", "B", "C")
    tasks: tuple[Task, ...] = ("chat", "code")
    for _ in range(600):
        op = rng.random()
        if op < 0.3:
            obs = Observation(rng.choice(deployments), rng.choice(tasks),
                              rng.choice((100, 1000, 5000)), 20, rng.uniform(0.1, 1.0), 0.02,
                              1.5, 0.0, "ProviderTimeout" if rng.random() < 0.1 else None,
                              False, clocks[0].now)
            for store in stores:
                store.record(obs)
        elif op < 0.4:
            step = rng.choice((0.001, 0.05, 0.1, 0.4, 2.0))
            for clock in clocks:
                clock.now += step
        elif op < 0.5:
            assert stores[0].refresh() == stores[1].refresh()
        elif op < 0.53:
            other.record(Observation(rng.choice(deployments), "chat", 1000, 20, 0.5, 0.02,
                                     1.5, 0.0, None, False, clocks[0].now))
            states = other.take_unpushed()
            for store in stores:
                store.update_remote("r2", states, {})
        elif op < 0.55:
            for store in stores:
                store.drop_remote(["r2"])
        else:
            dep, task, prompt = (rng.choice(deployments), rng.choice(tasks),
                                 rng.choice((100, 1000, 5000, 40_000)))
            view = stores[0].view(dep, task, prompt)
            assert (view.bucket, view.task, view.deployment_all) == _read_key_by_key(
                stores[1], dep, task, prompt)
        assert stores[0]._dirty == stores[1]._dirty
        assert stores[0]._keys_read() == stores[1]._wanted
        assert stores[0]._recent == stores[1]._recent


class _CountingStore(LocalStatsStore):
    def __init__(self, config: StatsConfig) -> None:
        super().__init__(config)
        self.refreshes = 0

    def refresh(self, budget_s: float | None = None) -> int:
        self.refreshes += 1
        return super().refresh(budget_s)


async def test_refresher_sleeps_until_a_change_and_spaces_its_passes() -> None:
    """No timer: an idle store's refresher never wakes, however much is read; a recorded
    observation wakes it at once (on a quiet service, in the wake-up of the request that
    recorded); while observations keep coming, refreshes are at least `refresh_interval_s`
    apart (observations in between wait for the next refresh); another replica's state wakes it
    too."""
    store = _CountingStore(StatsConfig(refresh_interval_s=0.02))
    refresher = asyncio.create_task(store.run_refresher())
    try:
        for _ in range(20):  # reads alone: nothing changed, nothing to refresh
            store.view("a", "chat", 100)
            await asyncio.sleep(0.005)
        assert store.refreshes == 0
        store.record(_ok("a", 0.2, time.time()))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert store.refreshes == 1  # at once, no timer in between
        started = time.perf_counter()
        for _ in range(10):  # an observation every 5 ms
            store.record(_ok("a", 0.2, time.time()))
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
        assert 2 <= store.refreshes <= 2 + elapsed / 0.02  # spaced, not one per observation
        await asyncio.sleep(0.05)  # quiet: no refresh on a timer
        assert store.refreshes <= 2 + elapsed / 0.02
        before = store.refreshes
        store.update_remote("replica-2", {}, {"a": 1})
        await asyncio.sleep(0.01)
        assert store.refreshes == before + 1
    finally:
        refresher.cancel()


def test_a_key_keeps_only_the_sketches_read_at_its_level() -> None:
    """A recorded observation lands in each key's kept sketches only; a state shared by an older
    replica, with the sketches no level reads (`e2e` of every answer, `queue`, `cached_e2e`)
    and without the E2E of non-streamed answers, decodes to the kept ones it has and merges
    into this replica's."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    obs = Observation("A", "chat", 700, 16, 0.2, 0.01, 0.4, 0.0, None, False, clock.now)
    store.record(obs)
    kept = {key: sorted(state.sketches) for key, state in store.own_states().items()}
    assert kept == {
        ("A", "chat", obs.bucket): ["ttft", "unstreamed_e2e"],
        ("A", "chat", ANY_BUCKET): ["tpot", "ttft", "unstreamed_e2e"],
        ("A", ANY, ANY_BUCKET): ["tpot"],
        (ANY, "chat", ANY_BUCKET): ["output_tokens"],
    }
    mine = store.own_states()[("A", "chat", ANY_BUCKET)]
    mine.record(replace(obs, streamed=False))
    old = orjson.loads(encode_state(mine))
    del old["s"]["unstreamed_e2e"]
    old["o"][1].pop("ok_unstreamed")
    old["s"] |= {name: old["s"]["ttft"] for name in ("e2e", "queue", "cached_e2e")}
    theirs = decode_state(orjson.dumps(old), mine.decay, mine.alpha)
    assert sorted(theirs.sketches) == ["tpot", "ttft"]
    mine.merge(theirs)
    assert mine.sketches["ttft"].count(clock.now) == pytest.approx(2.0)
    assert mine.sketches["unstreamed_e2e"].count(clock.now) == pytest.approx(1.0)
    summary = mine.summarize(clock.now)
    assert summary.n_ok == pytest.approx(4.0) and summary.n_unstreamed == pytest.approx(1.0)
