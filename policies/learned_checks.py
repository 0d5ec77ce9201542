"""Start-up checks that a learned router fits the policies naming it.

An artifact is calibrated for the tasks it was trained on (`LoadedRouter.tasks`) and to one
floor (`LoadedRouter.floor`). It must cover at least one task its policies serve (the router
skips it for the others), and it must not have been calibrated to a lower floor than any of
those policies holds: its "cheapest model predicted to clear the floor" would otherwise clear a
lower bar than the policy promises. An absolute floor (`min`) is checked against the
calibrated floor of each task the policy serves with the artifact (`floor.by_task` in its
metadata), not against the number pooled over its tasks. Pure: returns every problem, the
caller raises them at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from policies.labels import TASKS, Task
from policies.schema import PoliciesSpec, QualityFloor, TaskPolicy

if TYPE_CHECKING:
    from policies.learned.artifact import LoadedRouter


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
            problems += _floor_problems(name, router, use, use.policy.quality_floor)
    return problems


def _floors_by_task(router: LoadedRouter) -> Mapping[str, float] | None:
    """Per task, the calibrated floor in absolute terms (`floor.by_task.TASK.quality` in the
    metadata); None when the artifact records none (trained before it did)."""
    try:
        by_task = json.loads(router.metadata_json)["floor"]["by_task"]
        return {str(task): float(entry["quality"]) for task, entry in by_task.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _floor_problems(
    name: str, router: LoadedRouter, use: PolicyUse, policy: QualityFloor
) -> list[str]:
    """The calibrated floor against one policy's floor: same metric, never lower."""
    floor, where = router.floor, use.where
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
    if len(router.tasks) == 1:  # one task: the pooled number is that task's
        if floor.quality < policy.min:
            return [f"{head}: {calibrated} = {floor.quality:.4f} on its training data, below "
                    f"the policy's floor of min {policy.min}"]
        return []
    return _min_by_task(head, calibrated, router, use, policy.min)


def _min_by_task(
    head: str, calibrated: str, router: LoadedRouter, use: PolicyUse, minimum: float
) -> list[str]:
    """An absolute floor against a multi-task artifact: each task the policy serves with it
    against that task's own calibrated floor (pooled, an easy task hid a hard one's)."""
    by_task = _floors_by_task(router)
    if by_task is None:
        return [f"{head}: {calibrated} pooled over tasks {list(router.tasks)}, with no floor "
                f"per task recorded; the policy's floor is min {minimum}; retrain it"]
    served = [t for t in use.tasks if t in router.tasks]
    if not served:
        return [f"{head}: no calibrated floor for the policy's tasks {list(use.tasks)} (trained "
                f"for {list(router.tasks)}); the policy's floor is min {minimum}"]
    problems = []
    for task in served:
        quality = by_task.get(task)
        if quality is None:
            problems.append(f"{head}: no calibrated floor recorded for task {task}; the "
                            f"policy's floor is min {minimum}; retrain it")
        elif quality < minimum:
            problems.append(f"{head}: {calibrated} = {quality:.4f} on its {task} training "
                            f"rows, below the policy's floor of min {minimum}")
    return problems
