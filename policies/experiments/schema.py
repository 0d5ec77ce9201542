"""The `experiments:` section of a policy file: arms, shares, unit, guardrails, metrics, tests.

Pydantic models with `extra="forbid"`, frozen, validated once at load. Every cross-reference
inside one experiment (exactly one control, shares summing to 1, guardrails and the primary
metric naming a built-in or declared metric, start before stop) is checked here and all problems
are listed at once. An arm's `route` (`policy:default`, the task's own policy, or
`model:<name>`) is checked against the rest of the config by the policy loader, not here.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from datetime import datetime
from typing import Annotated, Final, Literal, get_args

from pydantic import ConfigDict, Field, model_validator

from policies.config_model import ConfigModel
from policies.labels import Task

AssignmentUnit = Literal["tenant", "user", "session", "request"]
BuiltinMetric = Literal["ttft_ms", "tpot_ms", "e2e_ms", "cost_usd", "error"]
BUILTIN_METRICS: Final[tuple[BuiltinMetric, ...]] = get_args(BuiltinMetric)
LATENCY_METRICS: Final[frozenset[str]] = frozenset({"ttft_ms", "tpot_ms", "e2e_ms"})
MAX_WINDOW: Final[int] = 5000
SHARE_TOLERANCE: Final[float] = 1e-6

Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")]


class _Model(ConfigModel):
    # Infinity is no threshold (`max_ms: .inf` never fires) and NaN none either (a floor of
    # NaN halted every arm: no bound is >= NaN), as in the rest of the config (`Frozen`).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ArmSpec(_Model):
    """One arm: a route (model preference or policy reference) and its share of units."""

    name: Name
    route: str = Field(min_length=1, description="'policy:default' or 'model:<name>'")
    control: bool = False
    share: float = Field(gt=0.0, le=1.0)


class FeedbackMetric(_Model):
    """A quality metric reported through `POST /v1/feedback` (or by a judge)."""

    name: Name
    kind: Literal["binary", "continuous"]
    range: tuple[float, float] = (0.0, 1.0)
    higher_is_better: bool = True

    @model_validator(mode="after")
    def _check_range(self) -> FeedbackMetric:
        low, high = self.range
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"metric {self.name!r}: range must be finite with low < high")
        if self.kind == "binary" and self.range != (0.0, 1.0):
            raise ValueError(f"metric {self.name!r}: a binary metric has range [0, 1]")
        return self


class _GuardrailBase(_Model):
    """How a guardrail tests (docs/experiments.md, "Guardrails → halts"): never before
    `min_sample` values; recent tests reach back `window` values; an arm within the limit is
    halted with probability at most `1 - confidence` over its whole life."""

    min_sample: int = Field(default=100, ge=1, description="values before any test may fire")
    window: int = Field(default=500, ge=1, le=MAX_WINDOW,
                        description="how far back a recent test may start (values)")
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0,
                              description="1 - false-halt probability over the arm's life")

    @model_validator(mode="after")
    def _check_window(self) -> _GuardrailBase:
        if self.window < self.min_sample:
            raise ValueError(f"window ({self.window}) must be >= min_sample ({self.min_sample})")
        return self


class QualityFloorGuardrail(_GuardrailBase):
    """Halt the arm when the mean of a declared feedback metric is surely below `floor`."""

    kind: Literal["quality_floor"] = "quality_floor"
    metric: Name
    floor: float


class ErrorRateGuardrail(_GuardrailBase):
    """Halt the arm when its error rate is surely above `max_rate`."""

    kind: Literal["error_rate"] = "error_rate"
    max_rate: float = Field(gt=0.0, lt=1.0)


class LatencyGuardrail(_GuardrailBase):
    """Halt the arm when its p95 TTFT or E2E is surely above `max_ms`."""

    kind: Literal["p95_ttft_ms", "p95_e2e_ms"]
    max_ms: float = Field(gt=0.0)


class CostGuardrail(_GuardrailBase):
    """Halt the arm when its mean cost per request is surely above `max_usd`."""

    kind: Literal["cost_per_request"] = "cost_per_request"
    max_usd: float = Field(gt=0.0)


Guardrail = Annotated[
    QualityFloorGuardrail | ErrorRateGuardrail | LatencyGuardrail | CostGuardrail,
    Field(discriminator="kind"),
]


class SequentialSettings(_Model):
    """The always-valid test used to stop early (see docs/experiments.md)."""

    method: Literal["msprt"] = "msprt"
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    min_sample: int = Field(default=100, ge=2, description="per arm, before the test may fire")
    primary_metric: str = "ttft_ms"
    mixture_sd: float = Field(
        default=0.2, gt=0.0, description="sd of the normal mixture, in standardised effect units"
    )


class ExperimentSpec(_Model):
    """One experiment: which traffic, which arms, how units are assigned, what stops it."""

    name: Name
    tasks: tuple[Task, ...] = Field(min_length=1)
    arms: tuple[ArmSpec, ...] = Field(min_length=2)
    unit: AssignmentUnit = "user"
    salt: str = Field(min_length=1)
    start: datetime | None = None
    stop: datetime | None = None
    guardrails: tuple[Guardrail, ...] = ()
    metrics: tuple[FeedbackMetric, ...] = ()
    sequential: SequentialSettings = SequentialSettings()

    @model_validator(mode="after")
    def _check(self) -> ExperimentSpec:
        problems = _arm_problems(self) + _metric_problems(self) + _time_problems(self)
        if problems:
            raise ValueError(f"experiment {self.name!r}: " + "; ".join(problems))
        return self

    @property
    def control(self) -> ArmSpec:
        """The control arm (exactly one, checked at load)."""
        return next(arm for arm in self.arms if arm.control)

    @property
    def treatments(self) -> tuple[ArmSpec, ...]:
        """Every arm but control, in declaration order."""
        return tuple(arm for arm in self.arms if not arm.control)

    @property
    def treatment_version(self) -> str:
        """A hash of what decides which unit gets which answer: tasks, arms (their routes and
        weights), unit and salt. Shared outcomes and halts are kept under it, so a changed arm
        starts afresh instead of inheriting the old route's numbers and halts; guardrails,
        metrics and dates may change without losing the data."""
        served = self.model_dump(mode="json", include={"tasks", "arms", "unit", "salt"})
        text = json.dumps(served, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def metric(self, name: str) -> FeedbackMetric | None:
        """The declared feedback metric called `name`, if any."""
        return next((m for m in self.metrics if m.name == name), None)

    def is_running(self, now: datetime) -> bool:
        """Whether `now` (timezone-aware) lies in [start, stop)."""
        after_start = self.start is None or now >= self.start
        before_stop = self.stop is None or now < self.stop
        return after_start and before_stop


def _repeated(kind: str, names: list[str]) -> list[str]:
    """Names must be unique within an experiment: one problem naming each repeated one."""
    return [f"{kind} name {name!r} appears {n} times" for name, n in Counter(names).items()
            if n > 1]


def _arm_problems(spec: ExperimentSpec) -> list[str]:
    problems: list[str] = []
    problems += _repeated("arm", [arm.name for arm in spec.arms])
    controls = sum(arm.control for arm in spec.arms)
    if controls != 1:
        problems.append(f"exactly one arm must have control: true, found {controls}")
    total = math.fsum(arm.share for arm in spec.arms)
    if abs(total - 1.0) > SHARE_TOLERANCE:
        problems.append(f"arm shares must sum to 1, they sum to {total:.6g}")
    return problems


def _metric_problems(spec: ExperimentSpec) -> list[str]:
    problems: list[str] = []
    declared = [m.name for m in spec.metrics]
    problems += _repeated("metric", declared)
    clashes = sorted(set(declared) & set(BUILTIN_METRICS))
    if clashes:
        problems.append(f"metric names {clashes} are built in; pick other names")
    for guardrail in spec.guardrails:
        if not isinstance(guardrail, QualityFloorGuardrail):
            continue
        metric = spec.metric(guardrail.metric)
        if metric is None:
            problems.append(f"quality_floor guardrail names undeclared metric {guardrail.metric!r}")
        elif not metric.range[0] <= guardrail.floor <= metric.range[1]:
            # Above the range (`floor: 70` meant as 70%) every arm is surely below it and is
            # halted at its first `min_sample` values; below it, the guardrail never fires.
            problems.append(f"quality_floor guardrail on {metric.name!r}: floor "
                            f"{guardrail.floor:g} is outside the metric's range "
                            f"[{metric.range[0]:g}, {metric.range[1]:g}]")
    primary = spec.sequential.primary_metric
    if primary not in BUILTIN_METRICS and primary not in declared:
        problems.append(f"sequential.primary_metric {primary!r} is neither built in nor declared")
    return problems


def _time_problems(spec: ExperimentSpec) -> list[str]:
    problems: list[str] = []
    for label, moment in (("start", spec.start), ("stop", spec.stop)):
        if moment is not None and moment.utcoffset() is None:
            problems.append(f"{label} must carry a timezone (e.g. 2025-01-01T00:00:00Z)")
    start, stop = spec.start, spec.stop
    if not problems and start is not None and stop is not None and start >= stop:
        problems.append("start must be before stop")
    return problems
