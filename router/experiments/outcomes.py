"""What each arm did: outcome and feedback records, the store protocol, the in-memory store.

An `OutcomeStore` keeps, per experiment, arm and metric: exact count, sum and sum of squares
(on the analysis scale: log for latencies, linear otherwise) for the sequential test, a bounded
uniform reservoir of raw values for bootstrap intervals and plots, and the most recent values
for guardrail windows. It also remembers which arm served a request id (so feedback can find
it) and the halts decided so far. The Redis implementation shared by replicas lives in
`outcomes_redis`; the statistics live in `analysis`.
"""

from __future__ import annotations

import math
import random
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

from policies.experiments.schema import LATENCY_METRICS, ExperimentSpec
from router.errors import NotFoundError, RequestError

RESERVOIR_SIZE: Final[int] = 4000
WINDOW_SIZE: Final[int] = 5000
EXPOSURE_CAPACITY: Final[int] = 200_000
UNIT_CAPACITY: Final[int] = 100_000  # ~17 MB of markers per experiment at most
_LOG_FLOOR_MS: Final[float] = 1e-3


@dataclass(frozen=True, slots=True)
class Outcome:
    """One finished request of an experiment (recorded in the pipeline's `finally`)."""

    experiment: str
    arm: str
    request_id: str
    error: bool
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    cost_usd: float | None = None
    # False when control's route answered for the arm (degraded): counted, but the answer is
    # not the arm's, so no exposure is remembered and feedback on it is not the arm's either.
    answered: bool = True

    def values(self) -> tuple[tuple[str, float], ...]:
        """The built-in metric values this outcome carries (`error` as 0/1, always present)."""
        optional = (
            ("ttft_ms", self.ttft_ms),
            ("tpot_ms", self.tpot_ms),
            ("e2e_ms", self.e2e_ms),
            ("cost_usd", self.cost_usd),
        )
        present = tuple((name, float(v)) for name, v in optional if v is not None)
        return (("error", 1.0 if self.error else 0.0), *present)


@dataclass(frozen=True, slots=True)
class Feedback:
    """One validated feedback value for a request (from the API or a judge)."""

    request_id: str
    metric: str
    value: float


@dataclass(frozen=True, slots=True)
class Exposure:
    """Which experiment and arm served a request id."""

    experiment: str
    arm: str


@dataclass(frozen=True, slots=True)
class Halt:
    """A guardrail stopped an arm: its traffic returns to control from then on."""

    arm: str
    guardrail: str
    reason: str
    at_sample: int
    observed: float
    threshold: float
    at: datetime


@dataclass(frozen=True, slots=True)
class MetricSamples:
    """Everything kept about one metric of one arm.

    `total`/`total_sq` are on the analysis scale (see `analysis_value`); `reservoir` and
    `recent` hold raw values, `recent` oldest first.
    """

    count: int
    total: float
    total_sq: float
    reservoir: tuple[float, ...] = ()
    recent: tuple[float, ...] = ()

    @property
    def mean(self) -> float:
        """Mean on the analysis scale (nan when empty)."""
        return self.total / self.count if self.count else math.nan

    @property
    def variance(self) -> float:
        """Unbiased variance on the analysis scale (nan below two values)."""
        if self.count < 2:
            return math.nan
        centred = self.total_sq - self.total * self.total / self.count
        return max(centred, 0.0) / (self.count - 1)


EMPTY_SAMPLES: Final[MetricSamples] = MetricSamples(count=0, total=0.0, total_sq=0.0)


@dataclass(frozen=True, slots=True)
class ArmData:
    """All metrics of one arm; `requests` counts recorded outcomes."""

    arm: str
    metrics: Mapping[str, MetricSamples] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        """Number of outcomes recorded (every outcome carries `error`)."""
        return self.samples("error").count

    def samples(self, metric: str) -> MetricSamples:
        """The samples of `metric` (empty when none were recorded)."""
        return self.metrics.get(metric, EMPTY_SAMPLES)


@dataclass(frozen=True, slots=True)
class ExperimentData:
    """A snapshot of one experiment at one instant, the input of the analysis."""

    experiment: str
    arms: Mapping[str, ArmData]
    halts: tuple[Halt, ...] = ()
    # Units counted on the arm they hash to (`OutcomeStore.count_unit`), for the SRM check;
    # only in a full snapshot.
    assigned: Mapping[str, int] = field(default_factory=dict)
    # Requests of each arm the policy barred its route from (`OutcomeStore.count_barred`):
    # they have no outcome, so the arm's figures are of the rest; only in a full snapshot.
    barred: Mapping[str, int] = field(default_factory=dict)

    @property
    def halted(self) -> frozenset[str]:
        """Names of the halted arms."""
        return frozenset(h.arm for h in self.halts)

    def arm(self, name: str) -> ArmData:
        """The data of arm `name` (empty when it has no outcomes yet)."""
        return self.arms.get(name, ArmData(arm=name))


class OutcomeStore(Protocol):
    """Per-arm outcomes, feedback and halts of experiments; shared by replicas when remote."""

    async def record(self, outcome: Outcome) -> None:
        """Add an outcome to its arm and remember which arm served its request id (when its
        route `answered`)."""
        ...

    async def expose(self, request_id: str, exposure: Exposure) -> None:
        """Remember a request's arm as soon as it is assigned (feedback may come first)."""
        ...

    async def exposure(self, request_id: str) -> Exposure | None:
        """The experiment and arm that served `request_id`, if still remembered."""
        ...

    async def record_feedback(self, exposure: Exposure, feedback: Feedback) -> bool:
        """Add a feedback value; False (and nothing recorded) if this metric already has one."""
        ...

    async def halt(self, experiment: str, halt: Halt) -> bool:
        """Persist a halt; False when the arm was already halted (the first halt wins)."""
        ...

    async def count_unit(self, experiment: str, arm: str, unit_key: str,
                         expires: bool) -> None:
        """Count `unit_key` once for `arm`, the arm it hashes to (later calls for the same
        unit add nothing). `expires`: the marker may be forgotten after the exposure TTL
        (units that are single requests), else it is kept longer (30 days in Redis)."""
        ...

    async def count_barred(self, experiment: str, arm: str) -> None:
        """Count one request of `arm` the policy barred the arm's route from (its model's
        fit, a risk rule, the floor, the cost ceiling): it has no outcome of the arm."""
        ...

    async def snapshot(self, experiment: str,
                       windows: Mapping[str, int] | None = None) -> ExperimentData:
        """Everything recorded for `experiment`; with `windows` (metric → n >= 1), only those
        metrics, each with its count, sums and n most recent values (no reservoir): what the
        guardrails read every pass, a small part of a full snapshot."""
        ...


def analysis_value(metric: str, value: float) -> float:
    """The value on the scale the sequential test uses: log for latencies, else unchanged."""
    if metric in LATENCY_METRICS:
        return math.log(max(value, _LOG_FLOOR_MS))
    return value


def validate_feedback(
    spec: ExperimentSpec, request_id: str, metric: str, value: float
) -> Feedback:
    """Check a feedback value against the experiment's declared metrics.

    Raises `RequestError` for an unknown metric, a non-finite value, a binary value other than
    0/1, or a continuous value outside the declared range.
    """
    declared = spec.metric(metric)
    if declared is None:
        names = sorted(m.name for m in spec.metrics)
        raise RequestError(
            f"unknown metric {metric!r} for experiment {spec.name!r}; declared: {names}",
            param="metric", code="unknown_metric",
        )
    number = float(value)
    low, high = declared.range
    if not math.isfinite(number):
        problem = "must be a finite number"
    elif declared.kind == "binary" and number not in (0.0, 1.0):
        problem = "must be 0 or 1 (binary metric)"
    elif not low <= number <= high:
        problem = f"must lie in [{low:g}, {high:g}]"
    else:
        return Feedback(request_id=request_id, metric=metric, value=number)
    raise RequestError(
        f"value {value!r} for metric {metric!r} {problem}", param="value", code="invalid_value"
    )


def exposure_key(tenant: str | None, request_id: str) -> str:
    """Where a request's arm is remembered: its id within its tenant's namespace, so feedback is
    taken only from the tenant that made the request, and two tenants sending the same
    `x-request-id` never overwrite each other's exposure. Length-prefixed: unambiguous."""
    owner = tenant or ""
    return f"{len(owner)}:{owner}:{request_id}"


def owner_of(key: str) -> str:
    """The tenant part of an `exposure_key` ("" for a key not made by it)."""
    length, sep, rest = key.partition(":")
    return rest[:int(length)] if sep and length.isdigit() else ""


async def submit_feedback(
    store: OutcomeStore,
    specs: Mapping[str, ExperimentSpec],
    tenant: str | None,
    request_id: str,
    metric: str,
    value: float,
) -> tuple[Exposure, bool]:
    """`POST /v1/feedback`: find the request's arm, validate, record.

    Returns the exposure and whether the value was recorded (False: duplicate, ignored).
    Raises `NotFoundError` when `tenant` made no request with that id (another tenant's ids are
    not found), or it is in no configured experiment.
    """
    key = exposure_key(tenant, request_id)
    exposure = await store.exposure(key)
    spec = specs.get(exposure.experiment) if exposure is not None else None
    if exposure is None or spec is None:
        raise NotFoundError(
            f"request {request_id!r} is not one of yours in a running experiment (or has "
            "expired)",
            param="request_id", code="unknown_request",
        )
    feedback = validate_feedback(spec, key, metric, value)
    return exposure, await store.record_feedback(exposure, feedback)


class _Accumulator:
    """Mutable per-metric state of the in-memory store (never leaves this module)."""

    def __init__(self, reservoir_size: int, window_size: int) -> None:
        self.count = 0
        self.total = 0.0
        self.total_sq = 0.0
        self.reservoir: list[float] = []
        self.reservoir_size = reservoir_size
        self.recent: deque[float] = deque(maxlen=window_size)

    def add(self, metric: str, value: float, rng: random.Random) -> None:
        scaled = analysis_value(metric, value)
        self.count += 1
        self.total += scaled
        self.total_sq += scaled * scaled
        self.recent.append(value)
        if len(self.reservoir) < self.reservoir_size:
            self.reservoir.append(value)
            return
        slot = rng.randrange(self.count)
        if slot < self.reservoir_size:
            self.reservoir[slot] = value

    def freeze(self, recent: int | None = None) -> MetricSamples:
        """Everything; with `recent`, only that many of the newest values and no reservoir."""
        if recent is None:
            return MetricSamples(
                count=self.count, total=self.total, total_sq=self.total_sq,
                reservoir=tuple(self.reservoir), recent=tuple(self.recent),
            )
        return MetricSamples(count=self.count, total=self.total, total_sq=self.total_sq,
                             recent=tuple(self.recent)[-recent:])


class MemoryOutcomeStore:
    """An `OutcomeStore` in one process's memory (single replica, tests, the CLI's replays)."""

    shared = False  # this process's alone: no halt predates it

    def __init__(
        self,
        rng: random.Random,
        *,
        reservoir_size: int = RESERVOIR_SIZE,
        window_size: int = WINDOW_SIZE,
        exposure_capacity: int = EXPOSURE_CAPACITY,
        unit_capacity: int = UNIT_CAPACITY,
    ) -> None:
        self._rng = rng
        self._sizes = (reservoir_size, window_size)
        self._capacity = exposure_capacity
        self._metrics: dict[tuple[str, str], dict[str, _Accumulator]] = {}
        # Per tenant (the owner part of an `exposure_key`), all tenants' together bounded by the
        # capacity: past it the tenant holding the most evicts its oldest, so a tenant sending
        # requests by the hundred thousand evicts its own records, never another tenant's
        # smaller share (whose feedback would then be refused, or counted twice). Until
        # 2026-12-06 each tenant had the capacity to itself: twenty tenants could hold 2.4 GiB.
        self._exposures: dict[str, OrderedDict[str, Exposure]] = {}
        self._feedback_seen: dict[str, OrderedDict[tuple[str, str], None]] = {}
        self._halts: dict[str, dict[str, Halt]] = {}
        # Per experiment, the units counted (oldest evicted past `unit_capacity`: an evicted
        # unit seen again is counted again) and their count per arm.
        self._units: dict[str, OrderedDict[str, None]] = {}
        self._assigned: dict[str, Counter[str]] = {}
        self._barred: dict[str, Counter[str]] = {}
        self._unit_capacity = unit_capacity

    def _add(self, experiment: str, arm: str, metric: str, value: float) -> None:
        per_arm = self._metrics.setdefault((experiment, arm), {})
        if metric not in per_arm:
            per_arm[metric] = _Accumulator(*self._sizes)
        per_arm[metric].add(metric, value, self._rng)

    async def record(self, outcome: Outcome) -> None:
        for metric, value in outcome.values():
            self._add(outcome.experiment, outcome.arm, metric, value)
        if outcome.answered:
            await self.expose(outcome.request_id, Exposure(outcome.experiment, outcome.arm))

    async def expose(self, request_id: str, exposure: Exposure) -> None:
        exposures = self._exposures.setdefault(owner_of(request_id), OrderedDict())
        exposures[request_id] = exposure
        exposures.move_to_end(request_id)
        _bound(self._exposures, self._capacity)

    async def exposure(self, request_id: str) -> Exposure | None:
        exposures = self._exposures.get(owner_of(request_id))
        return None if exposures is None else exposures.get(request_id)

    async def record_feedback(self, exposure: Exposure, feedback: Feedback) -> bool:
        key = (feedback.request_id, feedback.metric)
        seen = self._feedback_seen.setdefault(owner_of(feedback.request_id), OrderedDict())
        if key in seen:
            return False
        seen[key] = None
        _bound(self._feedback_seen, self._capacity)
        self._add(exposure.experiment, exposure.arm, feedback.metric, feedback.value)
        return True

    async def halt(self, experiment: str, halt: Halt) -> bool:
        halts = self._halts.setdefault(experiment, {})
        if halt.arm in halts:
            return False
        halts[halt.arm] = halt
        return True

    async def count_unit(self, experiment: str, arm: str, unit_key: str,
                         expires: bool) -> None:
        seen = self._units.setdefault(experiment, OrderedDict())
        if unit_key in seen:
            return
        seen[unit_key] = None
        if len(seen) > self._unit_capacity:
            seen.popitem(last=False)
        self._assigned.setdefault(experiment, Counter())[arm] += 1

    async def count_barred(self, experiment: str, arm: str) -> None:
        self._barred.setdefault(experiment, Counter())[arm] += 1

    async def snapshot(self, experiment: str,
                       windows: Mapping[str, int] | None = None) -> ExperimentData:
        arms = {
            arm: ArmData(arm=arm, metrics={m: acc.freeze(None if windows is None
                                                         else windows[m])
                                           for m, acc in per_arm.items()
                                           if windows is None or m in windows})
            for (name, arm), per_arm in self._metrics.items()
            if name == experiment
        }
        halts = tuple(self._halts.get(experiment, {}).values())
        if windows is not None:  # a guardrail pass reads its windows only
            return ExperimentData(experiment=experiment, arms=arms, halts=halts)
        return ExperimentData(experiment=experiment, arms=arms, halts=halts,
                              assigned=dict(self._assigned.get(experiment, {})),
                              barred=dict(self._barred.get(experiment, {})))


def _bound(by_owner: dict[str, OrderedDict[Any, Any]], capacity: int) -> None:
    """At most `capacity` records over every owner: past it, the oldest of the owner holding
    the most goes (a scan of the owners, who are the config's tenants, once over capacity)."""
    if sum(len(records) for records in by_owner.values()) <= capacity:
        return
    largest = max(by_owner, key=lambda owner: len(by_owner[owner]))
    by_owner[largest].popitem(last=False)
