"""Acceptance thresholds of issue 4 on the full in-repo data (slow: run with `-m slow`)."""

from __future__ import annotations

import pytest

from evals.floor import FloorSpec
from evals.multi import benchmark_replay
from evals.outcomes import MULTI_DIR, ROUTING_DIR, load_table
from evals.replay import pair_replay
from evals.routers import FitConfig

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("name", "max_apgr_paper", "paper_cpt50"), [("mmlu", 0.603, 0.3540), ("gsm8k", 0.622, 0.3364)]
)
def test_learned_router_beats_best_published_router(
    name: str, max_apgr_paper: float, paper_cpt50: float
) -> None:
    """5-fold decontaminated replay beats RouteLLM's best published APGR and CPT(50%)."""
    table = load_table(ROUTING_DIR / f"{name}.jsonl.gz")
    rep = pair_replay(table, FitConfig(), 5, "gpt-4-1106-preview", jobs=2)
    assert rep.router.apgr > max_apgr_paper
    assert rep.router.cpt50 < paper_cpt50
    assert rep.router.apgr > rep.random.apgr


@pytest.mark.parametrize("bench", ["math_level5", "cruxeval"])
def test_per_request_routing_saves_where_no_cheaper_single_model_qualifies(bench: str) -> None:
    """At 95% of the best single model the floor holds in >= 90% of resamples, >= 20% saved."""
    table = load_table(MULTI_DIR / "zeroeval_math_code.jsonl.gz", benchmark=bench, priced_only=True)
    res = benchmark_replay(table, bench, FloorSpec(0.95), FitConfig(), 5, 0)
    assert res.router.floor_hold_rate >= 0.90
    assert res.router.cost_saving >= 0.20
