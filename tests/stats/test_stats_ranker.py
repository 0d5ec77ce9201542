"""`StatsRanker` (the decision step's `Ranker`) ranks exactly as `rank()` on the same inputs, and
its per-policy settings cache follows the policy object and `explore_share`."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import cast

from policies.eligibility import RequestFacts, Verdict
from policies.schema import SloSpec, TaskPolicy, WeightsSpec
from router.decide import EXPLORED
from router.feedback import StatsRanker, held_to_client_wait, slo_targets
from router.runtime_config import RuntimeConfig
from router.scoring import Candidate, ScoreRequest, ScoringConfig, Weights, rank
from router.scoring.blend_cache import BlendCache
from router.slo import SloTracker
from router.stats import LocalStatsStore, Observation
from tests.stats.sim import FakeClock

DEPS = ("A", "B", "C")
PRICES = {"A": (3.0, 3.0), "B": (1.0, 1.0), "C": (0.5, 8.0)}
SLO = SloSpec(ttft_p95_ms=500, tpot_p95_ms=50, e2e_p99_ms=4000, availability=0.99)


def _setup() -> tuple[StatsRanker, LocalStatsStore, FakeClock]:
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(300):
        for j, dep in enumerate(DEPS):
            ttft = 0.1 + 0.15 * j + 0.01 * (i % 7)
            store.record(Observation(dep, "chat", 600, 40, ttft, 0.02, ttft + 0.8, 0.0,
                                     None, False, clock.now))
        clock.now += 0.01
    store.refresh()
    config = SimpleNamespace(deployments={
        d: SimpleNamespace(input_price_per_mtok=p[0], output_price_per_mtok=p[1])
        for d, p in PRICES.items()})
    # Blends never reused: `rank()` below blends at `clock.now`, and so must the ranker.
    ranker = StatsRanker(cast(RuntimeConfig, config), store, SloTracker({}), lambda d: d == "C",
                         random.Random(3), explore_share=0.2, clock=clock,
                         blends=BlendCache(reuse_s=0.0))
    return ranker, store, clock


def _direct(policy: TaskPolicy, store: LocalStatsStore, clock: FakeClock, seed: int,
            explore_share: float) -> list[tuple[str, float]]:
    facts = RequestFacts("chat", "low", 600, 40)
    cands = [Candidate(d, *PRICES[d], store.view(d, "chat", 600), d == "C", 0.0) for d in DEPS]
    w = policy.weights
    config = ScoringConfig(objective=policy.objective,
                           weights=Weights(slo=w.slo, cost=w.cost, latency=w.latency),
                           explore_share=explore_share)
    history = store.task_summary("chat")
    ranking = rank(ScoreRequest("chat", facts.risk, 600, 40, True), slo_targets(policy.slo), cands,
                   config, now=clock.now, rng=random.Random(seed),
                   output_history=history.output_tokens if history else None)
    return [(c.deployment, c.score) for c in ranking.candidates]


def test_ranker_matches_rank_across_policies_and_explore_share() -> None:
    ranker, store, clock = _setup()
    facts = RequestFacts("chat", "low", 600, 40)
    cost = TaskPolicy(candidates=DEPS, slo=SLO)
    latency = TaskPolicy(candidates=DEPS, slo=SLO, objective="min_latency")
    weighted = TaskPolicy(candidates=DEPS, slo=SLO, objective="weighted",
                          weights=WeightsSpec(cost=5.0))
    for step in range(60):
        policy = (cost, latency, weighted)[step % 3]
        if step == 30:
            ranker.explore_share = 0.0
        ranker.rng = random.Random(step)
        eligible = [Verdict(d, d, "candidate", (), 0.0) for d in DEPS]
        got = [(r.deployment, r.score) for r in ranker.rank(policy, facts, eligible)]
        assert got == _direct(policy, store, clock, step, ranker.explore_share)
        clock.now += 0.05


def test_ranker_names_an_exploration_probe_first_in_its_reasons() -> None:
    """Exactly the rankings `rank()` explored lead with the `explored` reason (8k-token prompts:
    no deployment has been seen at that size, so each is stale there)."""
    ranker, _, _ = _setup()
    facts = RequestFacts("chat", "low", 8000, 40)
    policy = TaskPolicy(candidates=DEPS, slo=SLO)
    ranker.explore_share = 0.2
    eligible = [Verdict(d, d, "candidate", (), 0.0) for d in DEPS]
    leads = []
    for step in range(200):
        ranker.rng = random.Random(step)
        ranked = ranker.rank(policy, facts, eligible)
        ranker.rng = random.Random(step)
        explored = ranker.ranking(policy, facts, DEPS).explored
        assert ranked[0][2].startswith(EXPLORED) == explored
        assert not any(r.why.startswith(EXPLORED) for r in ranked[1:])
        leads.append(explored)
    assert 0.1 < sum(leads) / len(leads) < 0.3


def test_a_request_is_held_to_a_tenth_less_than_its_client_waits_when_that_is_shorter() -> None:
    """The task's targets are shortened to 0.9 of the client's wait for them (a stream's first
    token, any answer's end), never lengthened, never set where the task has none."""
    targets = slo_targets(SloSpec(ttft_p95_ms=2000, e2e_p99_ms=5000))
    patient = RequestFacts("chat", "low", 600, 40, first_token_wait_s=120.0,
                           answer_wait_s=120.0)
    assert held_to_client_wait(targets, patient) is targets
    hasty = RequestFacts("chat", "low", 600, 40, first_token_wait_s=1.0, answer_wait_s=3.0)
    held = held_to_client_wait(targets, hasty)
    assert (held.ttft_p95_s, held.e2e_p99_s) == (0.9, 2.7)
    assert held.tpot_p95_s == targets.tpot_p95_s and held.availability == targets.availability
    whole = RequestFacts("chat", "low", 600, 40, stream=False, first_token_wait_s=1.0,
                         answer_wait_s=1.0)  # its first content is its end: E2E only
    assert (held_to_client_wait(targets, whole).ttft_p95_s,
            held_to_client_wait(targets, whole).e2e_p99_s) == (2.0, 0.9)
    over = RequestFacts("chat", "low", 600, 40, first_token_wait_s=-0.5, answer_wait_s=-0.5)
    assert held_to_client_wait(targets, over).ttft_p95_s == 1e-3  # still a target, not none
    none_set = slo_targets(SloSpec())
    assert held_to_client_wait(none_set, hasty) is none_set


def test_the_ranker_judges_a_hasty_request_against_its_clients_wait() -> None:
    """B (TTFT about 0.25 s) meets a 500 ms target; against a client that waits 0.2 s it misses."""
    ranker, _, _ = _setup()
    policy = TaskPolicy(candidates=DEPS, slo=SLO)
    eligible = [Verdict(d, d, "candidate", (), 0.0) for d in DEPS]
    ranker.explore_share = 0.0
    calm = {r.deployment: r.meets_slo for r in ranker.rank(
        policy, RequestFacts("chat", "low", 600, 40), eligible)}
    hasty = {r.deployment: r.meets_slo for r in ranker.rank(
        policy, RequestFacts("chat", "low", 600, 40, first_token_wait_s=0.2,
                             answer_wait_s=0.2), eligible)}
    assert calm["B"] and not hasty["B"]
