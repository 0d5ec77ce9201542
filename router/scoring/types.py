"""Inputs and outputs of route scoring: request, candidates, configuration, scored ranking.

Immutable values only. Those built per request and per candidate (`ScoreRequest`, `Candidate`,
`Blend`, `Prediction`, `ScoredCandidate`, `Ranking`) are `NamedTuple`s: a frozen dataclass's
`__init__` costs about 0.6 us per field on CPython 3.11 (measured: 7.7 us for `Prediction`),
too much for the 0.2 ms budget of scoring ten candidates. The decision step builds a
`ScoreRequest` and one `Candidate` per eligible deployment (price, `StatsView` from the stats
store, circuit state, SLO demotion penalty, its `Blend` when reused) and gets back a `Ranking`
whose `ScoredCandidate`s carry the per-candidate breakdown shown by the explain endpoint. The
maths is in `predict.py` and `rank.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from policies.labels import Risk, Task
from router.stats.quantiles import Quantiles
from router.stats.store import StatsView
from router.stats.ttft_model import TtftFit

Objective = Literal["min_cost", "min_latency", "weighted"]
Source = Literal["prior", "model", "bucket"]

PRIOR_TTFT = Quantiles(0.8, 1.5, 2.0, 3.0)
PRIOR_TPOT = Quantiles(0.03, 0.05, 0.06, 0.08)


class ScoreRequest(NamedTuple):
    """The routing-relevant facts of one request. A streamed one is scored on TTFT, TPOT and
    E2E; a non-streamed one (its first content is the whole answer) on E2E alone, as the SLO
    tracker counts it. `completions` is `n`: the choices decode side by side (latency as one)
    and are billed each (cost as `n`)."""

    task: Task
    risk: Risk
    prompt_tokens: int
    max_tokens: int | None = None
    stream: bool = True
    completions: int = 1


@dataclass(frozen=True, slots=True)
class Prior:
    """What an unobserved deployment is assumed to do, worth `weight` pseudo-observations."""

    ttft: Quantiles = PRIOR_TTFT
    tpot: Quantiles = PRIOR_TPOT
    error_rate: float = 0.02
    weight: float = 3.0


class Blend(NamedTuple):
    """The part of a candidate's prediction that no request changes, as of time `at`.

    Built by `predict.blend` from a `StatsView`'s summaries and the prior: each level's weight
    (its observations decayed to `at`, against the prior's `n0`), the TTFT and E2E levels' log
    quantiles, and the TPOT and error-rate estimates already blended. What the request brings
    (prompt size, output tokens, the age of waiting attempts) is applied per request.
    """

    at: float
    n0: float
    prior_ttft: tuple[float, float, float]  # log p50, p95, p99
    fit: TtftFit | None  # the deployment's TTFT model, None without residual ratios yet
    fit_n: float  # the fit's weight decayed to `at`
    fit_w: float  # its blend weight where the fit is fully trusted
    fit_ratio: tuple[float, float, float]  # log ratio p50, p95, p99
    bucket_w: float  # the prompt bucket's blend weight, negative without a TTFT sketch there
    bucket_ttft: tuple[float, float, float]  # log p50, p95, p99
    tpot_logs: tuple[float, float, float]  # log p50, p95, p99
    tpot_s: tuple[float, float, float]  # p50, p95, p99 in seconds
    error_rate: float
    error_rate_low: float
    n_eff: float  # TTFT observations at this prompt size, decayed to `at`
    # E2E of non-streamed answers (non-streamed requests only): deployment x task, then the
    # prompt bucket; weights negative without an E2E sketch at that level.
    e2e_task_w: float
    e2e_task: tuple[float, float, float]  # log p50, p95, p99
    e2e_bucket_w: float
    e2e_bucket: tuple[float, float, float]  # log p50, p95, p99
    n_e2e: float  # E2E observations at this prompt size, decayed to `at`


class Candidate(NamedTuple):
    """One eligible deployment with its prices, statistics and penalties."""

    deployment: str
    price_in_per_m: float  # USD per 1M prompt tokens
    price_out_per_m: float  # USD per 1M output tokens
    stats: StatsView
    unhealthy: bool = False  # circuit open or health check failing
    slo_penalty: float = 0.0  # from router.slo demotion, in [0, 1]
    prior: Prior | None = None  # overrides ScoringConfig.prior for this deployment
    blend: Blend | None = None  # `stats` blended earlier (`BlendCache`); None: blend now


@dataclass(frozen=True, slots=True)
class Weights:
    """Weights of the `weighted` objective (utility = slo*P(meet) - cost - latency terms)."""

    slo: float = 1.0
    cost: float = 1.0
    latency: float = 1.0


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """How to combine predictions, and how much to explore."""

    objective: Objective = "min_cost"
    weights: Weights = field(default_factory=Weights)
    explore_share: float = 0.03  # at most this share of requests explore (never `high` risk)
    fresh_n: float = 20.0  # effective observations above which estimates count as fresh
    prior: Prior = field(default_factory=Prior)
    default_output_tokens: int = 256
    output_quantile: float = 0.9  # of the task's output-token history
    error_z: float = 1.0  # fail availability when rate - z * stderr exceeds the budget

    def __post_init__(self) -> None:
        if not 0.0 <= self.explore_share <= 0.2:
            raise ValueError("explore_share must be within [0, 0.2]")


class Prediction(NamedTuple):
    """Per-candidate predictions at the SLO percentiles for this request."""

    ttft_p50_s: float
    ttft_q_s: float  # at the TTFT SLO percentile (p95)
    tpot_q_s: float  # at the TPOT SLO percentile (p95)
    e2e_p50_s: float
    e2e_q_s: float  # at the E2E SLO percentile (p99)
    error_rate: float
    error_rate_low: float  # one-sided lower confidence bound
    p_meet: float  # P(one request meets every latency target and succeeds)
    cost_usd: float
    n_eff: float  # effective observations at this prompt size (deployment x task x prompt
    # bucket) of what the request is scored on (TTFT; E2E when not streamed): what
    # exploration judges staleness by
    source: Source  # finest level that informed the TTFT estimate
    censored_wait_s: float  # age of the oldest attempt still waiting for a first token (not
    # streamed: for its first token or its whole answer)


class ScoredCandidate(NamedTuple):
    """A candidate's place in the ranking and why."""

    deployment: str
    rank: int
    score: float  # higher is better, within this ranking's objective
    meets_slo: bool
    demoted: bool
    unhealthy: bool
    explored: bool
    prediction: Prediction
    reasons: tuple[str, ...]


class Ranking(NamedTuple):
    """Candidates best first; `explored` when the first was chosen to refresh its estimates."""

    objective: Objective
    output_tokens: int
    candidates: tuple[ScoredCandidate, ...]
    explored: bool

    @property
    def best(self) -> ScoredCandidate | None:
        return self.candidates[0] if self.candidates else None
