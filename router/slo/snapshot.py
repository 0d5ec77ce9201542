"""The pydantic shapes of `GET /v1/slo`: per task and per deployment x task, per window and SLI.

Only boundary models live here; they are built by `SloTracker.snapshot()` and serialised by the
API layer (`model_dump(mode="json")`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from router.slo.targets import Sli


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SliWindow(_Frozen):
    """One SLI over one window."""

    sli: Sli
    objective: float  # target share of good events
    total: int
    bad: int
    attainment: float | None  # share of good events
    met: bool | None  # attainment >= objective
    burn_rate: float | None  # (bad / total) / (1 - objective)
    budget_remaining: float | None  # share of this window's error budget left


class WindowState(_Frozen):
    window_s: float
    slis: list[SliWindow]


class TargetsView(_Frozen):
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    e2e_p99_s: float | None
    availability: float


class DeploymentSlo(_Frozen):
    """One deployment's contribution to a task's SLO, and its demotion."""

    deployment: str
    windows: list[WindowState]  # over every prompt size
    penalty: float  # the largest of `penalty_by_prompt_tokens`
    demoted: bool
    # Latency burns demote per prompt size ("0-511", "512-2047", ..., "32768+" tokens).
    penalty_by_prompt_tokens: dict[str, float] = {}


class TaskSlo(_Frozen):
    task: str
    targets: TargetsView
    windows: list[WindowState]
    burn_alerts: list[str]  # rules firing for the task, e.g. "ttft 1h/5m >= 14.4"
    deployments: list[DeploymentSlo]


class SloSnapshot(_Frozen):
    """Everything `GET /v1/slo` returns."""

    generated_at: float
    windows_s: list[float]
    tasks: list[TaskSlo]
