"""Scoring with feedback, simulated: traffic follows latency, errors and prompt-size slopes."""

from __future__ import annotations

import random

from router.scoring import ScoringConfig
from router.slo import SloTargets
from tests.stats.sim import Behaviour, Sim, SimDeployment, share

CHAT = SloTargets(ttft_p95_s=1.0, tpot_p95_s=0.05, e2e_p99_s=5.0, availability=0.99)


def _pair(a: Behaviour, b: Behaviour, price_a: float = 1.0, price_b: float = 1.0) -> Sim:
    return Sim([SimDeployment("A", price_a, price_a, a), SimDeployment("B", price_b, price_b, b)],
               CHAT)


def test_faster_of_two_equal_price_candidates_gets_most_traffic() -> None:
    """A (TTFT p50 200 ms) beats B (400 ms) at equal price: >= 80% of 20 req/s."""
    sim = _pair(Behaviour(0.2), Behaviour(0.4))
    routed = sim.run(30, 20)
    assert share(routed, "A", since=routed[0][0] + 5) >= 0.8


def test_traffic_leaves_a_slowed_candidate_and_returns_after_recovery() -> None:
    """A's TTFT rises to 2 s: >= 90% goes to B within 15 s; A wins back most within 60 s."""
    sim = _pair(Behaviour(0.2), Behaviour(0.4))
    sim.run(30, 20)
    slowed = sim.clock.now
    sim.behaviour("A", Behaviour(2.0))
    during = sim.run(60, 20)
    assert share(during, "B", since=slowed + 3, until=slowed + 15) >= 0.9
    assert share(during, "B", since=slowed + 15) >= 0.9
    recovered = sim.clock.now
    sim.behaviour("A", Behaviour(0.2))
    after = sim.run(60, 20)
    assert share(after, "A", since=recovered + 45, until=recovered + 60) > 0.5


def test_half_failing_candidate_loses_its_traffic_within_ten_seconds() -> None:
    """A starts failing 50% of attempts: its share falls to exploration level within 10 s."""
    sim = _pair(Behaviour(0.2), Behaviour(0.4))
    sim.run(30, 20)
    start = sim.clock.now
    sim.behaviour("A", Behaviour(0.2, error_rate=0.5))
    routed = sim.run(60, 20)
    assert share(routed, "A", since=start + 10) <= 0.06


def test_long_prompts_go_to_lower_prefill_slope_short_ones_to_cheaper() -> None:
    """Only L meets the TTFT SLO at 8k tokens: long prompts go to L, short ones to cheap C."""
    sim = Sim([SimDeployment("C", 0.5, 1.0, Behaviour(0.2, ttft_slope_s_per_ktok=0.3)),
               SimDeployment("L", 2.0, 4.0, Behaviour(0.3, ttft_slope_s_per_ktok=0.05))], CHAT)
    lengths = random.Random(3)
    sim.run(60, 20, prompt=lambda: lengths.choice((200, 400, 1500, 4000, 8000)))
    long_routed = [sim.route(8000) for _ in range(50)]
    short_routed = [sim.route(200) for _ in range(50)]
    assert long_routed.count("L") >= 45
    assert short_routed.count("C") >= 45


def test_unused_candidate_gets_a_bounded_share_of_exploration() -> None:
    """Exploration sends a bounded share (about explore_share) to a stale, slower candidate."""
    sim = _pair(Behaviour(0.2), Behaviour(0.6))
    sim.config = ScoringConfig(explore_share=0.05)
    routed = sim.run(60, 20)
    b_share = share(routed, "B", since=routed[0][0] + 10)
    assert 0.0 < b_share <= 0.1


def test_high_risk_requests_never_explore() -> None:
    """With risk `high`, the stale candidate is never put first."""
    sim = _pair(Behaviour(0.2), Behaviour(0.6))
    sim.config = ScoringConfig(explore_share=0.2)
    sim.run(20, 20)
    picks = [sim.route(500, risk="high") for _ in range(300)]
    assert picks.count("B") == 0
