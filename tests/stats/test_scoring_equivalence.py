"""The flat hot-path scorer (`rank`, `predict`) returns exactly what the reference one does.

`router/scoring/reference.py` keeps the maths one helper per step; `rank.py`/`predict.py` are
flattened for speed (`bench/scoring.py`). Over randomised stores (every level populated or
missing, errors, stale summaries, attempts waiting), requests, targets, priors, penalties,
circuit states, streamed and non-streamed requests and answers and all three objectives, both
must give equal `Ranking`s: same order, same floats to the last bit, same reasons, and the same
exploration draws from the same seed.
"""

from __future__ import annotations

import random

import pytest

from policies.labels import Task
from router.scoring import Candidate, Prior, ScoreRequest, ScoringConfig, Weights, predict, rank
from router.scoring.predict import log_targets
from router.scoring.reference import reference_predict, reference_rank
from router.slo import SloTargets
from router.stats import LocalStatsStore, Observation, Quantiles
from router.stats.decay import Decay
from router.stats.estimators import (
    ANY,
    ANY_BUCKET,
    SKETCHES,
    SUMMARISED,
    KeyState,
    KeySummary,
    StatKey,
    keys_for,
)
from router.stats.store import StatsView
from tests.stats.sim import FakeClock

DEPLOYMENTS = [f"d{i}" for i in range(8)]
TASKS: tuple[Task, ...] = ("chat", "code")


def _store(rng: random.Random) -> tuple[LocalStatsStore, FakeClock]:
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for dep_i, dep in enumerate(DEPLOYMENTS[:-1]):  # the last one is never observed
        n = rng.choice((1, 3, 10, 60, 400))
        base = rng.uniform(0.05, 2.5)
        err_share = rng.choice((0.0, 0.0, 0.02, 0.3))
        prompts = rng.choice(((200,), (9000,), (200, 800, 3000, 9000, 40000)))
        for _ in range(n):
            prompt = rng.choice(prompts)
            ttft = (base + 0.1 * dep_i * prompt / 1000) * rng.lognormvariate(0, 0.4)
            err = "ProviderTimeout" if rng.random() < err_share else None
            out = rng.choice((0, 1, 2, 50, 400))
            tpot = rng.uniform(0.005, 0.12) if out > 1 else None
            streamed = rng.random() < 0.7  # non-streamed answers feed E2E instead
            store.record(Observation(dep, rng.choice(TASKS), prompt, out,
                                     None if err else ttft, tpot, ttft + 2.0, 0.0, err,
                                     rng.random() < 0.05, clock.now, streamed))
            clock.now += rng.choice((0.001, 0.05, 0.5))
        if rng.random() < 0.5:
            store.refresh()
    if rng.random() < 0.7:
        store.refresh()
    clock.now += rng.choice((0.0, 0.3, 4.0, 30.0))
    for dep in rng.sample(DEPLOYMENTS, 3):
        store.begin(dep, clock.now - rng.choice((0.1, 2.0, 20.0)), rng.choice((16, 9000)),
                    streamed=rng.random() < 0.5)
    return store, clock


def _targets(rng: random.Random) -> SloTargets:
    def maybe(x: float) -> float | None:
        return None if rng.random() < 0.15 else x

    return SloTargets(ttft_p95_s=maybe(rng.choice((0.3, 1.0, 3.0))),
                      tpot_p95_s=maybe(rng.choice((0.02, 0.05, 0.2))),
                      e2e_p99_s=maybe(rng.choice((2.0, 8.0, 60.0))),
                      availability=rng.choice((0.9, 0.99, 0.999)))


def _config(rng: random.Random) -> ScoringConfig:
    return ScoringConfig(objective=rng.choice(("min_cost", "min_latency", "weighted")),
                         weights=Weights(slo=rng.uniform(0.1, 3), cost=rng.uniform(0.1, 3),
                                         latency=rng.uniform(0.1, 3)),
                         explore_share=rng.choice((0.0, 0.03, 0.2)),
                         error_z=rng.choice((0.0, 1.0, 2.0)))


@pytest.mark.parametrize("seed", range(40))
def test_flat_ranking_equals_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    store, clock = _store(rng)
    custom = Prior(ttft=Quantiles(0.3, 0.5, 0.6, 0.8), error_rate=0.05, weight=1.0)
    for _ in range(25):
        task = rng.choice(TASKS)
        prompt = rng.choice((0, 16, 700, 3000, 9000, 50000))
        request = ScoreRequest(task, rng.choice(("low", "medium", "high")), prompt,
                               rng.choice((None, 1, 20, 256, 4000)), rng.random() < 0.7,
                               rng.choice((1, 1, 2, 8)))
        cands = [Candidate(d, rng.choice((0.0, 0.5, 3.0)), rng.choice((0.0, 1.0, 15.0)),
                           store.view(d, task, prompt), unhealthy=rng.random() < 0.1,
                           slo_penalty=rng.choice((0.0, 0.0, 0.0, 0.4, 1.0)),
                           prior=custom if rng.random() < 0.2 else None)
                 for d in rng.sample(DEPLOYMENTS, rng.randint(1, len(DEPLOYMENTS)))]
        targets, config = _targets(rng), _config(rng)
        summary = store.task_summary(task)
        history = summary.output_tokens if summary is not None and rng.random() < 0.7 else None
        now = clock.now + rng.choice((0.0, 0.01, 1.0))
        draw = rng.random()
        fast = rank(request, targets, cands, config, now=now, rng=random.Random(draw),
                    output_history=history)
        ref = reference_rank(request, targets, cands, config, now=now, rng=random.Random(draw),
                             output_history=history)
        assert fast == ref
        for c in cands:
            for out in (1, 2, 300):
                assert predict(c, request, out, targets, config, now) == reference_predict(
                    c, request, out, targets, config, now, log_targets(targets))



def _every_sketch(store: LocalStatsStore, observed: list[Observation]) -> dict[StatKey, KeyState]:
    """The store's keys as they would be if each kept every sketch, from the same observations."""
    config = store.config
    states: dict[StatKey, KeyState] = {}
    for obs in observed:
        for key in keys_for(obs):
            if key not in states:
                states[key] = KeyState(Decay(config.half_life_s), config.alpha,
                                       with_model=key[0] != ANY and key[1] == ANY, kept=SKETCHES)
            states[key].record(obs)
    return states


def _in_full(states: dict[StatKey, KeyState], view: StatsView, task: Task) -> StatsView:
    """`view` with each level's summary holding the quantiles of every summarised sketch."""
    bucket = next(k for k in states if k[:2] == (view.deployment, task) and k[2] != ANY_BUCKET)

    def full(level: KeySummary | None, key: StatKey) -> KeySummary | None:
        return None if level is None else states[key].summarize(level.at, SUMMARISED)

    return view._replace(bucket=full(view.bucket, bucket),
                         task=full(view.task, (view.deployment, task, ANY_BUCKET)),
                         deployment_all=full(view.deployment_all,
                                             (view.deployment, ANY, ANY_BUCKET)))


@pytest.mark.parametrize("seed", range(20))
def test_summaries_hold_every_quantile_a_decision_reads(seed: int) -> None:
    """A key keeps, and its summary freezes, only the sketches its level is read for (`kept_at`,
    `read_at`); ranking on summaries of keys that keep every sketch, summarised whole, gives the
    very same result (a decision reading a quantile that its level leaves out would differ: it
    would fall back to the prior)."""
    rng = random.Random(seed)
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    task: Task = "chat"
    observed: list[Observation] = []
    for dep_i, dep in enumerate(DEPLOYMENTS):
        for _ in range(rng.choice((3, 40))):
            ttft = (0.1 + 0.2 * dep_i) * rng.lognormvariate(0, 0.4)
            observed.append(Observation(dep, task, 700, rng.choice((2, 50, 400)), ttft,
                                        rng.uniform(0.005, 0.1), ttft + 2.0, 0.0, None, False,
                                        clock.now))
            store.record(observed[-1])
            clock.now += 0.01
    clock.now += 0.5
    views = [store.view(d, task, 700) for d in DEPLOYMENTS]
    every = _every_sketch(store, observed)
    full_views = [_in_full(every, v, task) for v in views]
    assert all(v.bucket is not None and v.bucket.tpot is None for v in views)
    assert all(v.bucket is not None and v.bucket.tpot is not None for v in full_views)
    history = store.task_summary(task)
    assert history is not None and history.output_tokens is not None
    request = ScoreRequest(task, "medium", 700, None, True)
    targets, config, draw = _targets(rng), _config(rng), rng.random()
    limited, widened = (
        rank(request, targets, [Candidate(v.deployment, 1.0, 2.0, v) for v in vs], config,
             now=clock.now, rng=random.Random(draw), output_history=history.output_tokens)
        for vs in (views, full_views))
    assert limited == widened
