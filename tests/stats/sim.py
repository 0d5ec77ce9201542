"""A deterministic discrete-time simulation of routing with feedback, for scoring tests.

Simulated deployments answer with a log-normal TTFT around `intercept + slope * prompt_ktokens`,
a fixed TPOT and an error probability; behaviour can change over time. Each request is ranked by
the real scorer from a real `LocalStatsStore`, sent to the first candidate, tracked in flight,
and recorded when its answer completes. Time is a `FakeClock`; randomness is a seeded `Random`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from router.scoring import Candidate, ScoreRequest, ScoringConfig, rank
from router.slo import SloTargets
from router.stats import LocalStatsStore, Observation, StatsConfig


@dataclass
class RecordingStore(LocalStatsStore):
    """The in-memory store, keeping each observation it is given (`seen`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Observation] = []

    def record(self, obs: Observation) -> None:
        self.seen.append(obs)
        super().record(obs)


class FakeClock:
    """Wall clock under test control."""

    now: float = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass(frozen=True)
class Behaviour:
    """How a simulated deployment answers."""

    ttft_intercept_s: float
    ttft_slope_s_per_ktok: float = 0.0
    sigma: float = 0.2
    tpot_s: float = 0.02
    error_rate: float = 0.0


@dataclass
class SimDeployment:
    name: str
    price_in: float
    price_out: float
    behaviour: Behaviour


@dataclass
class Sim:
    """Routes requests through the scorer and feeds the outcomes back into the store."""

    deployments: list[SimDeployment]
    targets: SloTargets
    config: ScoringConfig = field(default_factory=ScoringConfig)
    seed: int = 7
    half_life_s: float = 5.0
    clock: FakeClock = field(default_factory=FakeClock)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.world = random.Random(self.seed + 1)
        self.store = LocalStatsStore(StatsConfig(half_life_s=self.half_life_s), clock=self.clock)
        self.pending: list[tuple[float, int, int, Observation | None]] = []
        self._n = 0

    def _complete_until(self, t: float) -> None:
        while self.pending and self.pending[0][0] <= t:
            _, _, ticket, obs = heapq.heappop(self.pending)
            if obs is None:
                self.store.first_token(ticket)
                continue
            self.store.end(ticket)
            self.store.record(obs)

    def route(self, prompt_tokens: int, output_tokens: int = 50, risk: str = "low") -> str:
        """Rank, send to the first candidate, schedule the outcome; returns the deployment."""
        now = self.clock.now
        self._complete_until(now)
        request = ScoreRequest(task="chat", risk=risk,  # type: ignore[arg-type]
                               prompt_tokens=prompt_tokens, max_tokens=output_tokens)
        candidates = [Candidate(d.name, d.price_in, d.price_out,
                                self.store.view(d.name, "chat", prompt_tokens))
                      for d in self.deployments]
        ranking = rank(request, self.targets, candidates, self.config, now=now, rng=self.rng)
        chosen = ranking.candidates[0].deployment
        dep = next(d for d in self.deployments if d.name == chosen)
        self._schedule(dep, prompt_tokens, output_tokens, now)
        return chosen

    def _schedule(self, dep: SimDeployment, prompt_tokens: int, output_tokens: int,
                  now: float) -> None:
        b = dep.behaviour
        ticket = self.store.begin(dep.name, now, prompt_tokens)
        self._n += 1
        if self.world.random() < b.error_rate:
            obs = Observation(dep.name, "chat", prompt_tokens, 0, None, None, 0.05, 0.0,
                              "ProviderUnavailable", False, now + 0.05)
            heapq.heappush(self.pending, (obs.t, self._n, ticket, obs))
            return
        mean = b.ttft_intercept_s + b.ttft_slope_s_per_ktok * prompt_tokens / 1000
        ttft = mean * math.exp(self.world.gauss(0.0, b.sigma))
        e2e = ttft + b.tpot_s * (output_tokens - 1)
        obs = Observation(dep.name, "chat", prompt_tokens, output_tokens, ttft, b.tpot_s, e2e,
                          0.0, None, False, now + e2e)
        heapq.heappush(self.pending, (now + ttft, self._n, ticket, None))
        heapq.heappush(self.pending, (obs.t, self._n, ticket, obs))

    def run(self, seconds: float, rate: float, prompt: Callable[[], int] = lambda: 500,
            output_tokens: int = 50) -> list[tuple[float, str]]:
        """Open-loop arrivals every `1 / rate` s for `seconds`; returns (time, deployment)."""
        out = []
        next_refresh = self.clock.now
        for _ in range(round(seconds * rate)):
            if self.clock.now >= next_refresh:  # what the background refresher does
                self.store.refresh()
                next_refresh = self.clock.now + self.store.config.refresh_interval_s
            out.append((self.clock.now, self.route(prompt(), output_tokens)))
            self.clock.now += 1.0 / rate
        return out

    def behaviour(self, name: str, behaviour: Behaviour) -> None:
        next(d for d in self.deployments if d.name == name).behaviour = behaviour


def share(routed: list[tuple[float, str]], name: str, since: float = -math.inf,
          until: float = math.inf) -> float:
    """Share of requests routed to `name` with arrival time in [since, until)."""
    window = [d for t, d in routed if since <= t < until]
    return sum(d == name for d in window) / len(window) if window else 0.0
