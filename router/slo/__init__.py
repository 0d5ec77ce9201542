"""Per-task SLOs: targets, rolling attainment, multi-window error-budget burn rates, demotion.

`SloTracker` records requests and attempts, answers `penalty(deployment, task, now)` for the
scorer and `snapshot()` for `GET /v1/slo`. The burn maths are pure functions in `burn.py`.
"""

from router.slo.burn import (
    DEFAULT_RULES,
    BurnRule,
    attainment,
    budget_remaining,
    burn_rate,
    demotion_penalty,
)
from router.slo.snapshot import DeploymentSlo, SliWindow, SloSnapshot, TaskSlo, WindowState
from router.slo.targets import E2E_Q, SLIS, TPOT_Q, TTFT_Q, Sli, SloTargets
from router.slo.tracker import SloConfig, SloTracker, event_deltas

__all__ = [
    "DEFAULT_RULES", "E2E_Q", "SLIS", "TPOT_Q", "TTFT_Q", "BurnRule", "DeploymentSlo", "Sli",
    "SliWindow", "SloConfig", "SloSnapshot", "SloTargets", "SloTracker", "TaskSlo",
    "WindowState", "attainment", "budget_remaining", "burn_rate", "demotion_penalty",
    "event_deltas",
]
