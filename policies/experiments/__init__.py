"""Experiments in the policy files: the spec model and sticky assignment of units to arms.

Only configuration and pure assignment live here; outcome recording, statistics and reports
are the service's job (`router.experiments`).
"""

from policies.experiments.assignment import (
    Assigner,
    Assignment,
    UnitIds,
    arm_for_fraction,
    assign,
    unit_fraction,
)
from policies.experiments.schema import (
    BUILTIN_METRICS,
    ArmSpec,
    CostGuardrail,
    ErrorRateGuardrail,
    ExperimentSpec,
    FeedbackMetric,
    Guardrail,
    LatencyGuardrail,
    QualityFloorGuardrail,
    SequentialSettings,
)

__all__ = [
    "BUILTIN_METRICS",
    "ArmSpec",
    "Assigner",
    "Assignment",
    "CostGuardrail",
    "ErrorRateGuardrail",
    "ExperimentSpec",
    "FeedbackMetric",
    "Guardrail",
    "LatencyGuardrail",
    "QualityFloorGuardrail",
    "SequentialSettings",
    "UnitIds",
    "arm_for_fraction",
    "assign",
    "unit_fraction",
]
