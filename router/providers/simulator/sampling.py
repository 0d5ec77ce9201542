"""Pure random draws of a simulated request's behaviour, from a profile and an injected RNG.

Lognormals are parameterised by their median and 99th percentile (quantile matching:
`mu = ln(p50)`, `sigma = (ln(p99) - ln(p50)) / 2.3263`), which reproduces both exactly. A profile
that carries a quantile table for TTFT or TPOT is drawn from it by inverse CDF instead (one
uniform draw); without one the draws are those of the lognormal, unchanged. Nothing here sleeps,
reads a clock or keeps state; the caller passes a `random.Random` (or any `Rng`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from router.providers.simulator import quantile_table
from router.providers.simulator.profile import ModelProfile

Z99 = 2.3263478740408408  # standard normal 99th percentile


class Rng(Protocol):
    """The part of `random.Random` the draws use (also offered by `HashRandom`)."""

    def random(self) -> float: ...

    def gauss(self, mu: float = 0.0, sigma: float = 1.0) -> float: ...


class Outcome(Enum):
    """What the simulator does with one request."""

    OK = "ok"
    RATE_LIMITED = "429"
    SERVER_ERROR = "500"
    UNAVAILABLE = "503"
    HANG = "hang"


ERROR_STATUS: dict[Outcome, int] = {
    Outcome.RATE_LIMITED: 429,
    Outcome.SERVER_ERROR: 500,
    Outcome.UNAVAILABLE: 503,
}


@dataclass(frozen=True)
class Lognormal:
    """A lognormal distribution as `(mu, sigma)` of the natural log."""

    mu: float
    sigma: float

    @staticmethod
    def from_quantiles(p50: float, p99: float) -> Lognormal | None:
        """Quantile-matched lognormal; `None` when the median is 0 (the value is always 0)."""
        if p50 <= 0:
            return None
        high = max(p99, p50)
        return Lognormal(math.log(p50), (math.log(high) - math.log(p50)) / Z99)

    def draw(self, rng: Rng) -> float:
        if self.sigma == 0:
            return math.exp(self.mu)
        return math.exp(rng.gauss(self.mu, self.sigma))


def draw_quantiles(rng: Rng, p50: float, p99: float) -> float:
    """One draw from the lognormal with median `p50` and 99th percentile `p99` (exactly `p50`
    when there is no spread)."""
    if p99 <= p50:
        return max(p50, 0.0)
    dist = Lognormal.from_quantiles(p50, p99)
    return dist.draw(rng) if dist is not None else 0.0


def draw_outcome(profile: ModelProfile, rng: Rng) -> Outcome:
    """Error, hang or success, with the profile's rates (one uniform draw)."""
    u = rng.random()
    for outcome, rate in (
        (Outcome.RATE_LIMITED, profile.error_rate_429),
        (Outcome.SERVER_ERROR, profile.error_rate_500),
        (Outcome.UNAVAILABLE, profile.error_rate_503),
        (Outcome.HANG, profile.hang_rate),
    ):
        if u < rate:
            return outcome
        u -= rate
    return Outcome.OK


def draw_base_ttft_ms(profile: ModelProfile, rng: Rng) -> float:
    """TTFT before prefill and prefix cache: the quantile table when the profile has one (it
    holds the slow tail too), else the body lognormal, or the slow tail with its share."""
    if profile.ttft_quantiles_ms is not None:
        return quantile_table.quantile(profile.ttft_quantiles_ms, rng.random())
    if profile.ttft_tail_share > 0 and rng.random() < profile.ttft_tail_share:
        tail = draw_quantiles(rng, profile.ttft_tail_p50_ms, profile.ttft_tail_max_ms)
        return min(tail, profile.ttft_tail_max_ms)
    return draw_quantiles(rng, profile.ttft_p50_ms, profile.ttft_p99_ms)


def ttft_ms(base_ms: float, profile: ModelProfile, prompt_tokens: int, prefix_hit: bool) -> float:
    """Base draw plus prefill of the prompt, times the prefix-cache factor on a hit."""
    total = base_ms + profile.prefill_ms_per_token * prompt_tokens
    return total * profile.prefix_cache_factor if prefix_hit else total


def draw_tpot_ms(profile: ModelProfile, rng: Rng) -> float:
    """One request's time per output token (drawn once per request, independent of TTFT): from
    the quantile table when the profile has one, else the p50/p99 lognormal."""
    if profile.tpot_quantiles_ms is not None:
        return quantile_table.quantile(profile.tpot_quantiles_ms, rng.random())
    return draw_quantiles(rng, profile.tpot_p50_ms, profile.tpot_p99_ms)


def draw_output_tokens(profile: ModelProfile, rng: Rng) -> int:
    """Wanted output length: lognormal, capped by `output_tokens_max` (not yet by `max_tokens`)."""
    drawn = round(draw_quantiles(rng, profile.output_tokens_p50, profile.output_tokens_p99))
    return max(1, min(drawn, profile.output_tokens_max))


def draw_cut(profile: ModelProfile, rng: Rng) -> bool:
    """Whether this successful request's stream (or connection) is cut."""
    return profile.cut_rate > 0 and rng.random() < profile.cut_rate
