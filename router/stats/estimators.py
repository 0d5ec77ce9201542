"""The estimators kept for one statistics key, and their frozen summary.

A key is `(deployment, task, bucket)` with wildcards: `("A", "chat", 2)` for a prompt-length
bucket, `("A", "chat", ANY_BUCKET)` for deployment x task, `("A", "", ANY_BUCKET)` for the
deployment (which also holds the TTFT-in-prompt-tokens model), `("", "chat", ANY_BUCKET)` for the
task across deployments (output tokens, cached answers). `KeyState` is mutable and mergeable;
`KeySummary` is its frozen read-only summary. Latency sketches hold successful, uncached
upstream attempts only; failures and cached answers are counted apart.

A non-streamed answer's first content is the whole answer: it feeds the E2E sketch (and the
output tokens), never the TTFT and TPOT sketches nor the TTFT model, which streamed answers alone
feed; `n_unstreamed` counts such answers apart so that each estimate is weighted by its own
samples.

A summary freezes only the quantiles that decisions read at its key's level (`read_at`): the
TTFT and E2E of a prompt bucket, the TPOT and E2E of deployment x task, the TPOT of a
deployment, the output tokens of a task. At low request rates every request triggers a
refresh, and summarising every sketch of every key it touched was most of that refresh's cost.
A key keeps only the sketches read at its level (`kept_at`): recording into sketches nobody read
was a third of a request's statistics work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from router.stats.decay import Decay, DecayedSums
from router.stats.observation import Observation
from router.stats.quantiles import LEVELS, Quantiles
from router.stats.sketch import DecayedSketch
from router.stats.ttft_model import TtftFit, TtftModel

StatKey = tuple[str, str, int]
ANY: Final = ""
ANY_BUCKET: Final = -1
# The E2E sketch holds non-streamed answers only; named apart from the "e2e" sketch of every
# answer that replicas before session 22 kept and may still publish (decoding skips that one).
E2E: Final = "unstreamed_e2e"
SKETCHES: Final[tuple[str, ...]] = ("ttft", "tpot", "output_tokens", E2E)
SUMMARISED: Final = SKETCHES


def _none(_: Observation) -> None:
    return None


# Each sketch's value in a streamed observation, and in a non-streamed one (whose "first
# token" is the whole answer: it speaks of E2E only).
OBSERVED: Final[dict[str, Callable[[Observation], float | None]]] = {
    "ttft": attrgetter("ttft_s"), "tpot": attrgetter("tpot_s"),
    "output_tokens": attrgetter("output_tokens"), E2E: _none}
OBSERVED_UNSTREAMED: Final[dict[str, Callable[[Observation], float | None]]] = {
    "ttft": _none, "tpot": _none, "output_tokens": attrgetter("output_tokens"),
    E2E: attrgetter("e2e_s")}
_OK: Final = {"ok": 1.0}
_OK_UNSTREAMED: Final = {"ok": 1.0, "ok_unstreamed": 1.0}


def read_at(key: StatKey) -> tuple[str, ...]:
    """The sketches whose quantiles decisions read at `key`'s level (`router/scoring/predict.py`:
    the bucket's TTFT and E2E, deployment x task's TPOT and E2E, the deployment's TPOT, the
    task's output tokens; a deployment's TTFT comes from its model)."""
    deployment, task, bucket = key
    if deployment == ANY:
        return ("output_tokens",)
    if bucket != ANY_BUCKET:
        return ("ttft", E2E)
    return ("tpot", E2E) if task != ANY else ("tpot",)


def kept_at(key: StatKey) -> tuple[str, ...]:
    """The sketches `key` keeps: those `read_at` its level, and deployment x task's TTFT, which
    hedge triggers read whole (`LocalStatsStore.latency_quantiles`)."""
    deployment, task, bucket = key
    if deployment != ANY and task != ANY and bucket == ANY_BUCKET:
        return ("ttft", "tpot", E2E)
    return read_at(key)


def keys_for(obs: Observation) -> tuple[StatKey, ...]:
    """Every key an observation updates, finest first."""
    return (
        (obs.deployment, obs.task, obs.bucket),
        (obs.deployment, obs.task, ANY_BUCKET),
        (obs.deployment, ANY, ANY_BUCKET),
        (ANY, obs.task, ANY_BUCKET),
    )


@dataclass(frozen=True, slots=True)
class KeySummary:
    """What one key knows, frozen at time `at`; decayed weights shrink by `2**(-dt/half_life)`.
    Quantiles not read at the key's level (`read_at`) are None. `n_ok` counts every success,
    `n_unstreamed` the non-streamed ones among them (the E2E sketch's samples; the others are
    the TTFT and TPOT sketches')."""

    at: float
    half_life_s: float
    n_ok: float
    n_err: float
    n_cached: float
    ttft: Quantiles | None
    tpot: Quantiles | None
    output_tokens: Quantiles | None
    errors_by_class: tuple[tuple[str, float], ...]
    ttft_fit: TtftFit | None
    e2e: Quantiles | None = None
    n_unstreamed: float = 0.0

    def decayed(self, weight: float, now: float) -> float:
        """`weight` (as of `at`) decayed to `now`."""
        return weight * 2.0 ** (-(now - self.at) / self.half_life_s) if now > self.at else weight

    def n(self, now: float) -> float:
        """Effective number of successful upstream observations at `now`."""
        return self.decayed(self.n_ok, now)

    @property
    def error_rate(self) -> float:
        """Decayed share of failed attempts among upstream attempts (time-invariant)."""
        total = self.n_ok + self.n_err
        return self.n_err / total if total > 0.0 else 0.0


class KeyState:
    """Mutable, mergeable estimators for one key: the sketches named in `kept` (of `SKETCHES`,
    by default all), the decayed outcome counts and, for a deployment key, the TTFT model."""

    __slots__ = ("alpha", "decay", "model", "outcomes", "sketches")

    def __init__(self, decay: Decay, alpha: float, with_model: bool,
                 kept: tuple[str, ...] = SKETCHES) -> None:
        self.decay, self.alpha = decay, alpha
        self.sketches = {name: DecayedSketch(decay, alpha) for name in kept}
        self.outcomes = DecayedSums(decay)
        self.model = TtftModel(decay, alpha) if with_model else None

    def record(self, obs: Observation) -> None:
        """Fold one observation in: cached and failed attempts never touch latency sketches; a
        non-streamed answer feeds E2E (and output tokens), not TTFT, TPOT or the TTFT model."""
        t = obs.t
        if obs.cached:
            self.outcomes.add({"cached": 1.0}, t)
            return
        if obs.error is not None:
            self.outcomes.add({"err": 1.0, "err:" + obs.error: 1.0}, t)
            return
        if obs.streamed:
            self.outcomes.add(_OK, t)
            if obs.ttft_s is not None and self.model is not None:
                self.model.add(obs.prompt_tokens, obs.ttft_s, t)
            values = OBSERVED
        else:
            self.outcomes.add(_OK_UNSTREAMED, t)
            values = OBSERVED_UNSTREAMED
        for name, sketch in self.sketches.items():
            value = values[name](obs)
            if value is not None and (obs.whole or name != "output_tokens"):
                sketch.add(value, t)

    def merge(self, other: KeyState) -> None:
        """Add `other` into this state (a sketch only one of them keeps is kept)."""
        for name, sketch in other.sketches.items():
            mine = self.sketches.get(name)
            if mine is None:
                self.sketches[name] = sketch.copy()
            else:
                mine.merge(sketch)
        self.outcomes.merge(other.outcomes)
        if other.model is not None:
            if self.model is None:
                self.model = TtftModel(self.decay, other.model.ratio.alpha)
            self.model.merge(other.model)

    def copy(self) -> KeyState:
        out = KeyState(self.decay, self.alpha, with_model=False, kept=())
        out.sketches = {name: s.copy() for name, s in self.sketches.items()}
        out.outcomes = self.outcomes.copy()
        if self.model is not None:
            out.model = TtftModel.from_parts(self.model.sums.copy(), self.model.ratio.copy())
        return out

    def summarize(self, now: float, quantiles_of: tuple[str, ...] = SUMMARISED) -> KeySummary:
        """Freeze the current estimates, with the quantiles of the sketches named in
        `quantiles_of` (a few of `SUMMARISED`, kept by this key; the others None). Costs tens of
        microseconds: keep it off the hot path."""
        o = self.outcomes
        classes = tuple(sorted((name[4:], o.value(name, now)) for name in o.names()
                               if name.startswith("err:")))
        sk = self.sketches
        found = {name: Quantiles.of_sketch(sk[name].quantiles(LEVELS)) for name in quantiles_of
                 if name in sk}
        return KeySummary(
            at=now, half_life_s=self.decay.half_life_s, n_ok=o.value("ok", now),
            n_err=o.value("err", now), n_cached=o.value("cached", now),
            ttft=found.get("ttft"), tpot=found.get("tpot"),
            output_tokens=found.get("output_tokens"), errors_by_class=classes,
            ttft_fit=self.model.fit(now) if self.model is not None else None,
            e2e=found.get(E2E), n_unstreamed=o.value("ok_unstreamed", now),
        )
