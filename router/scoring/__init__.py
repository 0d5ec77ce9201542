"""Pure route scoring: predict each candidate's latency at the SLO percentiles, cost and chance
of meeting the task's SLO, then rank by the policy's objective with bounded exploration.

Entry point: `rank(request, targets, candidates, config, now=..., rng=...) -> Ranking`.
Statistics come in as `StatsView`s from `router.stats`; SLO targets from `router.slo`.
"""

from router.scoring.predict import expected_output_tokens, predict, share_below
from router.scoring.rank import rank
from router.scoring.types import (
    Candidate,
    Objective,
    Prediction,
    Prior,
    Ranking,
    ScoredCandidate,
    ScoreRequest,
    ScoringConfig,
    Weights,
)

__all__ = [
    "Candidate", "Objective", "Prediction", "Prior", "Ranking", "ScoreRequest", "ScoredCandidate",
    "ScoringConfig", "Weights", "expected_output_tokens", "predict", "rank", "share_below",
]
