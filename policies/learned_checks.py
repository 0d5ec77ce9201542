"""Start-up checks that a learned router fits the policies naming it.

An artifact is calibrated for the tasks it was trained on (`LoadedRouter.tasks`) and to one
floor (`LoadedRouter.floor`). It must cover at least one task its policies serve (the router
skips it for the others), and it must not have been calibrated to a lower floor than any of
those policies holds: its "cheapest model predicted to clear the floor" would otherwise clear a
lower bar than the policy promises. Pure: returns every problem, the caller raises them at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from policies.labels import TASKS, Task
from policies.schema import PoliciesSpec, QualityFloor, TaskPolicy

if TYPE_CHECKING:
    from policies.learned.artifact import CalibratedFloor, LoadedRouter


@dataclass(frozen=True)
class PolicyUse:
    """One policy naming an artifact: where it is in the config and which tasks it serves."""

    where: str
    tasks: tuple[Task, ...]
    policy: TaskPolicy


def learned_uses(policies: PoliciesSpec) -> dict[str, list[PolicyUse]]:
    """Per `learned_router` directory, the policies naming it (the default serves every task
    without its own policy)."""
    uses: dict[str, list[PolicyUse]] = {}
    default_tasks = tuple(t for t in TASKS if t not in policies.tasks)
    named = [("policies.default", default_tasks, policies.default)]
    named += [(f"policies.tasks.{t}", (t,), p) for t, p in policies.tasks.items()]
    for where, tasks, policy in named:
        if policy.learned_router is not None and tasks:
            uses.setdefault(policy.learned_router, []).append(PolicyUse(where, tasks, policy))
    return uses


def artifact_problems(name: str, router: LoadedRouter, uses: Sequence[PolicyUse]) -> list[str]:
    """Why `router` must not serve the policies in `uses` (empty: it may)."""
    served = sorted({t for use in uses for t in use.tasks})
    problems = []
    if not set(router.tasks) & set(served):
        problems.append(
            f"learned_router {name}: trained for tasks {list(router.tasks)}, none of the tasks "
            f"its policies serve {served}; retrain it with `slorouter train-router` (it labels "
            "rows with router tasks) on outcomes of those tasks"
        )
    for use in uses:
        if use.policy.quality_floor is not None:
            problems += _floor_problems(name, router.floor, use.where, use.policy.quality_floor)
    return problems


def _floor_problems(
    name: str, floor: CalibratedFloor | None, where: str, policy: QualityFloor
) -> list[str]:
    """The calibrated floor against one policy's floor: same metric, never lower."""
    head = f"learned_router {name} (used by {where})"
    if floor is None:
        return [f"{head}: its metadata records no calibrated floor; retrain it"]
    calibrated = f"calibrated to {floor.fraction} x {floor.reference}"
    if floor.metric != policy.metric:
        return [f"{head}: calibrated on {floor.metric}, the policy's floor is on {policy.metric}"]
    if policy.relative_to is not None and policy.ratio is not None:
        if floor.reference != policy.relative_to:
            return [f"{head}: {calibrated}, the policy's floor is {policy.ratio} x "
                    f"{policy.relative_to} (another reference model)"]
        if floor.fraction < policy.ratio:
            return [f"{head}: {calibrated}, below the policy's floor of {policy.ratio} x "
                    f"{policy.relative_to}"]
        return []
    assert policy.min is not None  # QualityFloor: either `min` or `relative_to` and `ratio`
    if floor.quality is None:
        return [f"{head}: {calibrated} with no absolute value recorded, the policy's floor is "
                f"min {policy.min}; retrain it"]
    if floor.quality < policy.min:
        return [f"{head}: {calibrated} = {floor.quality:.4f} on its training data, below the "
                f"policy's floor of min {policy.min}"]
    return []
