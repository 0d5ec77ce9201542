"""Pure ranking: objectives, priors for unknown candidates, health, and the explain breakdown."""

from __future__ import annotations

import random

import pytest

from router.scoring import (
    Candidate,
    Prior,
    ScoreRequest,
    ScoringConfig,
    Weights,
    expected_output_tokens,
    rank,
    share_below,
)
from router.slo import SloTargets
from router.stats import LocalStatsStore, Observation, Quantiles, StatsView
from tests.stats.sim import FakeClock

CHAT = SloTargets(ttft_p95_s=1.0, tpot_p95_s=0.05, e2e_p99_s=5.0, availability=0.99)
NO_EXPLORE = ScoringConfig(explore_share=0.0)
REQUEST = ScoreRequest("chat", "low", 500, 20)


def _store(ttfts: dict[str, float], n: int = 200, error_every: int = 0,
           spread: float = 0.0) -> tuple[LocalStatsStore, FakeClock]:
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(n):
        for dep, mean in ttfts.items():
            ttft = mean * (1.0 + spread * ((i % 11) / 10 - 0.5))
            err = "ProviderUnavailable" if error_every and i % error_every == 0 else None
            store.record(Observation(dep, "chat", 500, 20, None if err else ttft, 0.02,
                                     ttft + 0.4, 0.0, err, False, clock.now + i * 0.005))
    clock.now += 2.0
    return store, clock


def _view(store: LocalStatsStore, dep: str) -> StatsView:
    return store.view(dep, "chat", 500)


def _order(candidates: list[Candidate], clock: FakeClock,
           config: ScoringConfig = NO_EXPLORE) -> list[str]:
    ranking = rank(REQUEST, CHAT, candidates, config, now=clock.now, rng=random.Random(0))
    return [c.deployment for c in ranking.candidates]


def test_min_cost_picks_cheapest_that_meets_the_slo() -> None:
    """Of two candidates meeting the SLO, min_cost prefers the cheaper even if slower."""
    store, clock = _store({"fast": 0.2, "slow": 0.6})
    cands = [Candidate("fast", 3.0, 3.0, _view(store, "fast")),
             Candidate("slow", 1.0, 1.0, _view(store, "slow"))]
    assert _order(cands, clock) == ["slow", "fast"]


def test_equal_price_tie_goes_to_the_faster_candidate() -> None:
    """At equal price, the candidate with lower predicted TTFT p95 ranks first."""
    store, clock = _store({"A": 0.2, "B": 0.4})
    cands = [Candidate("B", 1.0, 1.0, _view(store, "B")),
             Candidate("A", 1.0, 1.0, _view(store, "A"))]
    assert _order(cands, clock)[0] == "A"


def test_when_none_meets_the_slo_the_most_likely_ranks_first() -> None:
    """If no candidate meets the targets, the highest P(meet) leads regardless of cost."""
    store, clock = _store({"A": 1.5, "B": 3.0}, spread=0.8)
    cands = [Candidate("B", 0.1, 0.1, _view(store, "B")),
             Candidate("A", 5.0, 5.0, _view(store, "A"))]
    ranking = rank(REQUEST, CHAT, cands, NO_EXPLORE, now=clock.now, rng=random.Random(0))
    assert [c.deployment for c in ranking.candidates] == ["A", "B"]
    assert not any(c.meets_slo for c in ranking.candidates)
    assert ranking.candidates[0].prediction.p_meet > ranking.candidates[1].prediction.p_meet
    assert any("ttft_p95" in r for r in ranking.candidates[0].reasons)


def test_when_none_meets_the_slo_equally_slow_candidates_go_to_the_cheaper() -> None:
    """Both too slow for the target, within a few percent of each other: the cheaper leads,
    whichever estimate is a hair faster (they were compared exactly, and the traffic went to
    the dearer half the time, in blocks as burn-rate demotion moved it back and forth)."""
    for cheap_ms, dear_ms in ((2.52, 2.48), (2.48, 2.52)):
        store, clock = _store({"cheap": cheap_ms, "dear": dear_ms}, spread=0.2)
        cands = [Candidate("dear", 2.0, 4.0, _view(store, "dear")),
                 Candidate("cheap", 1.0, 2.0, _view(store, "cheap"))]
        ranking = rank(REQUEST, CHAT, cands, NO_EXPLORE, now=clock.now, rng=random.Random(0))
        assert not any(c.meets_slo for c in ranking.candidates)
        assert [c.deployment for c in ranking.candidates] == ["cheap", "dear"], (cheap_ms,
                                                                                 dear_ms)


def test_unhealthy_candidates_rank_last_but_stay_listed() -> None:
    """An open circuit puts a candidate last; it is still there as a last resort."""
    store, clock = _store({"A": 0.2, "B": 0.4})
    cands = [Candidate("A", 1.0, 1.0, _view(store, "A"), unhealthy=True),
             Candidate("B", 1.0, 1.0, _view(store, "B"))]
    assert _order(cands, clock) == ["B", "A"]


def test_error_rate_above_the_availability_budget_fails_the_slo() -> None:
    """A candidate failing 1 in 4 attempts does not meet a 99% availability target."""
    store, clock = _store({"A": 0.2}, error_every=4)
    store2, _ = _store({"B": 0.4})
    cands = [Candidate("A", 1.0, 1.0, _view(store, "A")),
             Candidate("B", 1.0, 1.0, _view(store2, "B"))]
    ranking = rank(REQUEST, CHAT, cands, NO_EXPLORE, now=clock.now, rng=random.Random(0))
    assert ranking.candidates[0].deployment == "B"
    a = ranking.candidates[1]
    assert a.prediction.error_rate == pytest.approx(0.25, abs=0.03)
    assert not a.meets_slo


def test_unknown_candidate_is_scored_from_the_prior_with_no_observations() -> None:
    """A never-seen deployment gets the prior's predictions and n_eff 0."""
    store, clock = _store({"A": 0.2})
    prior = Prior(ttft=Quantiles(0.3, 0.5, 0.6, 0.8))
    cands = [Candidate("new", 1.0, 1.0, _view(store, "new"), prior=prior)]
    ranking = rank(REQUEST, CHAT, cands, NO_EXPLORE, now=clock.now, rng=random.Random(0))
    pred = ranking.candidates[0].prediction
    assert (pred.source, pred.n_eff) == ("prior", 0.0)
    assert pred.ttft_q_s == pytest.approx(0.6)


def test_a_fit_on_long_prompts_alone_says_nothing_about_short_ones() -> None:
    """Cold start on 8k-token prompts: `cheap` answered them in 2.5 s, `long` in 0.4 s. At
    8k, `long` is the one that meets the SLO; for a 16-token prompt neither fit holds (both
    are scored from the prior), so the cheaper one gets the chance to show what it does."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(12):
        for dep, ttft in (("cheap", 2.5), ("long", 0.4)):
            store.record(Observation(dep, "chat", 8000, 20, ttft * (1 + 0.01 * (i % 3)), 0.02,
                                     ttft + 0.4, 0.0, None, False, clock.now + i * 0.25))
    clock.now += 3.0

    def ranked(prompt_tokens: int) -> list[tuple[str, str]]:
        cands = [Candidate(d, price, price, store.view(d, "chat", prompt_tokens))
                 for d, price in (("cheap", 1.0), ("long", 4.0))]
        ranking = rank(ScoreRequest("chat", "low", prompt_tokens, 20), CHAT, cands,
                       NO_EXPLORE, now=clock.now, rng=random.Random(0))
        return [(c.deployment, c.prediction.source) for c in ranking.candidates]

    assert ranked(8000) == [("long", "bucket"), ("cheap", "bucket")]
    assert ranked(16) == [("cheap", "prior"), ("long", "prior")]


def test_exploration_puts_the_unknown_candidate_first_sometimes() -> None:
    """With explore_share 0.2, about a fifth of rankings lead with the stale candidate."""
    store, clock = _store({"A": 0.2})
    cands = [Candidate("A", 1.0, 1.0, _view(store, "A")),
             Candidate("new", 1.0, 1.0, _view(store, "new"))]
    rng = random.Random(11)
    config = ScoringConfig(explore_share=0.2)
    firsts = [rank(REQUEST, CHAT, cands, config, now=clock.now, rng=rng).candidates[0]
              for _ in range(2000)]
    explored = [c for c in firsts if c.explored]
    assert all(c.deployment == "new" for c in explored)
    assert 0.15 < len(explored) / len(firsts) < 0.25


def test_exploration_sends_one_probe_at_a_time() -> None:
    """A stale candidate whose previous probe still waits for its first token is not explored
    again: it is about to be observed, and a slow one would only collect more requests."""
    store, clock = _store({"A": 0.2})
    store.begin("new", clock.now - 0.5)
    cands = [Candidate("A", 1.0, 1.0, _view(store, "A")),
             Candidate("new", 1.0, 1.0, _view(store, "new"))]
    config = ScoringConfig(explore_share=0.2)
    rng = random.Random(11)
    rankings = [rank(REQUEST, CHAT, cands, config, now=clock.now, rng=rng) for _ in range(500)]
    assert not any(r.explored for r in rankings)
    assert all(r.candidates[0].deployment == "A" for r in rankings)


def test_exploration_judges_staleness_at_the_request_prompt_size() -> None:
    """A candidate seen only on long prompts is still unknown for short ones: exploration
    probes it there (else a cheaper deployment first seen on long prompts would never be tried
    on short ones), and not on the long prompts it is well known for."""
    clock = FakeClock()
    store = LocalStatsStore(clock=clock)
    for i in range(200):
        t = clock.now + i * 0.005
        store.record(Observation("known", "chat", 16, 20, 0.2, 0.02, 0.6, 0.0, None, False, t))
        store.record(Observation("known", "chat", 8000, 20, 0.4, 0.02, 0.8, 0.0, None, False, t))
        store.record(Observation("long_only", "chat", 8000, 20, 0.5, 0.02, 0.9, 0.0, None,
                                 False, t))
    clock.now += 2.0
    config = ScoringConfig(explore_share=0.2)

    def explored(prompt_tokens: int) -> list[str]:
        cands = [Candidate(d, 1.0, 1.0, store.view(d, "chat", prompt_tokens))
                 for d in ("known", "long_only")]
        request = ScoreRequest("chat", "low", prompt_tokens, 20)
        rng = random.Random(5)
        rankings = [rank(request, CHAT, cands, config, now=clock.now, rng=rng)
                    for _ in range(1000)]
        return [r.candidates[0].deployment for r in rankings if r.explored]

    short = explored(16)
    assert set(short) == {"long_only"} and 0.15 < len(short) / 1000 < 0.25
    assert explored(8000) == []


def test_min_latency_prefers_faster_whatever_the_price() -> None:
    """min_latency ranks by predicted latency at the SLO percentile, not price."""
    store, clock = _store({"A": 0.2, "B": 0.5})
    cands = [Candidate("B", 0.1, 0.1, _view(store, "B")),
             Candidate("A", 9.0, 9.0, _view(store, "A"))]
    assert _order(cands, clock, ScoringConfig(objective="min_latency", explore_share=0.0))[0] \
        == "A"


@pytest.mark.parametrize("objective", ["min_latency", "weighted"])
def test_a_fast_deployment_failing_over_the_budget_ranks_after_a_healthy_slower_one(
        objective: str) -> None:
    """A fails a third of its attempts, fast: 0.2 s / 0.67 still read as faster than B's
    0.5 s, so under min_latency it kept most of a task's traffic (each failure retried on B)
    until burn-rate demotion came, ~8 s on (an audit), or never under the demotion's burn
    threshold. Over the availability budget, it now ranks after every candidate within it."""
    failing, clock = _store({"A": 0.2}, error_every=3)
    healthy, _ = _store({"B": 0.5})
    cands = [Candidate("A", 1.0, 1.0, failing.view("A", "chat", 500)),
             Candidate("B", 1.0, 1.0, healthy.view("B", "chat", 500))]
    config = ScoringConfig(objective=objective, explore_share=0.0)  # type: ignore[arg-type]
    ranking = rank(REQUEST, CHAT, cands, config, now=clock.now, rng=random.Random(0))
    assert [c.deployment for c in ranking.candidates] == ["B", "A"]
    assert "error_rate_over_budget" in ranking.candidates[1].reasons


def test_weighted_objective_trades_cost_against_latency() -> None:
    """A heavy cost weight picks the cheap candidate; a heavy latency weight the fast one."""
    store, clock = _store({"A": 0.2, "B": 0.7})
    cands = [Candidate("B", 0.1, 0.1, _view(store, "B")),
             Candidate("A", 9.0, 9.0, _view(store, "A"))]
    cheap = ScoringConfig(objective="weighted", weights=Weights(cost=10.0, latency=0.1),
                          explore_share=0.0)
    quick = ScoringConfig(objective="weighted", weights=Weights(cost=0.1, latency=10.0),
                          explore_share=0.0)
    assert (_order(cands, clock, cheap)[0], _order(cands, clock, quick)[0]) == ("B", "A")


def test_expected_output_tokens_caps_history_by_max_tokens() -> None:
    """History p90 is used, capped by max_tokens; without either the default applies."""
    history = Quantiles(100, 300, 400, 800)
    assert expected_output_tokens(200, history, NO_EXPLORE) == 200
    assert expected_output_tokens(1000, history, NO_EXPLORE) == 300
    assert expected_output_tokens(None, None, NO_EXPLORE) == NO_EXPLORE.default_output_tokens


def test_share_below_matches_the_lognormal_median_and_quantile() -> None:
    """At the median the share is 0.5; at the p95 value it is 0.95."""
    assert share_below(1.0, 1.0, 2.0, 1.6448536269514722) == pytest.approx(0.5)
    assert share_below(2.0, 1.0, 2.0, 1.6448536269514722) == pytest.approx(0.95)


def test_stalled_provider_is_noticed_from_waiting_attempts() -> None:
    """An attempt waiting past the predicted TTFT p95 raises the TTFT to its age at every
    percentile: past the target, the stalled deployment has no chance of meeting it, even
    against a candidate that is only known from the prior."""
    store, clock = _store({"A": 0.2, "B": 0.4})
    store.begin("A", clock.now - 1.5)
    cands = [Candidate("A", 1.0, 1.0, _view(store, "A")),
             Candidate("B", 1.0, 1.0, _view(store, "B"))]
    ranking = rank(REQUEST, CHAT, cands, NO_EXPLORE, now=clock.now, rng=random.Random(0))
    assert ranking.candidates[0].deployment == "B"
    stalled = ranking.candidates[1].prediction
    assert stalled.censored_wait_s == pytest.approx(1.5)
    assert stalled.ttft_p50_s == stalled.ttft_q_s == pytest.approx(1.5)
    assert stalled.p_meet == 0.0
    unknown = [Candidate("A", 1.0, 1.0, _view(store, "A")),
               Candidate("new", 1.0, 1.0, _view(store, "new"))]
    ranking = rank(REQUEST, CHAT, unknown, NO_EXPLORE, now=clock.now, rng=random.Random(0))
    assert [c.deployment for c in ranking.candidates] == ["new", "A"]
